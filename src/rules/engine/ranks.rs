//! Which rank each hit belongs to.

use std::collections::{BTreeSet, HashMap};

use super::state::{pid_of_key, proc_key, FastMap, Hit, State};
use crate::log;

/// Which rank a hit belongs to: its own prefix or line, else its (host, pid) from NCCL's init
/// lines, else its pid alone, else the one rank its input's lines show, else what the input's
/// name says (never for a launcher's line).
pub(crate) struct Ranks {
    pub(crate) map: FastMap<u64, (u32, u32)>,
    /// Pids (as `pid_of_key` keeps them) that name one rank whatever the host.
    pub(crate) pid_only: HashMap<u32, u32>,
    pub(crate) source_ranks: Vec<BTreeSet<u32>>,
    /// What each input's file or folder name says (`rank3.log`, `attempt_0/3/stderr.log`, ...).
    pub(crate) names: Vec<Option<log::NameHint>>,
}

impl Ranks {
    pub(crate) fn new(st: &mut State) -> Ranks {
        let map = std::mem::take(&mut st.rank_map);
        let mut m: HashMap<u32, Option<u32>> = HashMap::new();
        for (key, (rank, _)) in &map {
            let e = m.entry(pid_of_key(*key)).or_insert(Some(*rank));
            if *e != Some(*rank) {
                *e = None;
            }
        }
        let pid_only = m.into_iter().filter_map(|(p, r)| r.map(|r| (p, r))).collect();
        let names: Vec<&str> = st.names.iter().map(String::as_str).collect();
        Ranks { map, pid_only, source_ranks: st.source_ranks.clone(), names: log::ranks_from_names(&names) }
    }

    pub(crate) fn of(&self, h: &Hit) -> Option<u32> {
        h.rank
            .or_else(|| h.pid.and_then(|p| self.map.get(&proc_key(h.host.as_deref().unwrap_or(""), p)).map(|x| x.0)))
            .or_else(|| h.pid.and_then(|p| self.pid_only.get(&pid_of_key(u64::from(p))).copied()))
            // The file's own content (`[rank6]:`, `rank 6 nRanks 8`) before what its name says: a
            // torchrun `--log-dir` folder names the local rank, the lines the global one.
            .or_else(|| {
                let rs = self.source_ranks.get(h.source)?;
                (!h.launcher && rs.len() == 1).then(|| *rs.iter().next().unwrap())
            })
            .or_else(|| match self.names.get(h.source)?.as_ref()? {
                _ if h.launcher => None,
                log::NameHint::Rank { rank, .. } => Some(*rank),
                log::NameHint::HostPid { host, pid } => self.map.get(&proc_key(host, *pid)).map(|x| x.0),
            })
    }
}
