//! Input (files, folders, stdin, gzip, zstd) and the records parsed from its lines.
pub mod input;
pub mod prefilter;
pub mod prefix;
pub mod record;
pub mod records;

pub use input::{clean_line, expand, is_clean, open, Input, LineReader};
pub use prefilter::Prefilter;
pub use prefix::{strip_prefixes, Prefixed};
pub use record::{is_unrelated_warning, level_of, looks_like_error, parse, Kind, Level, Record};
