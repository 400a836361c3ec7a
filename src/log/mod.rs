//! Input (files, folders, stdin, gzip, zstd, tar, zip) and the records parsed from its lines.
pub mod archive;
pub mod chunks;
mod grams;
pub mod input;
pub mod jobs;
pub mod literals;
pub mod names;
pub mod prefilter;
pub mod prefix;
pub mod record;
pub mod records;

pub use input::{
    clean_line, expand, expand_all, is_clean, open, sniff, Content, Expanded, Input, LineReader, ReadStats,
};
pub use names::{ranks_from_names, NameHint, RankKind};
pub use prefilter::{Prefilter, Reach};
pub use prefix::{strip_prefixes, Prefixed};
pub use record::{is_unrelated_warning, level_of, looks_like_error, parse, Kind, Level, Record};
