//! Input (files, folders, stdin, gzip, zstd, tar, zip) and the records parsed from its lines.
pub mod archive;
pub mod input;
pub mod names;
pub mod prefilter;
pub mod record;

pub use input::{clean_line, expand, is_clean, open, sniff, Content, Expanded, Input, LineReader};
pub use names::{ranks_from_names, NameHint, RankKind};
pub use prefilter::Prefilter;
pub use record::{level_of, parse, strip_rank_prefix, Kind, Level, Record};
