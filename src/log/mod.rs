//! Input (files, folders, stdin, gzip, zstd) and the records parsed from its lines.
pub mod input;
pub mod names;
pub mod prefilter;
pub mod record;

pub use input::{clean_line, expand, is_clean, open, Input, LineReader};
pub use names::{ranks_from_names, NameHint, RankKind};
pub use prefilter::Prefilter;
pub use record::{level_of, parse, strip_rank_prefix, Kind, Level, Record};
