//! `nccl list | fetch | path | clean`: the user cache of NCCL releases (src/nccl/).
use anyhow::Result;

use crate::cli::{NcclCommand, NcclOpts};
use crate::error::Typed;
use crate::nccl::{index, Cache, Fetcher, Got, Release};

pub fn run(cmd: NcclCommand) -> Result<u8> {
    match cmd {
        NcclCommand::List { available, opts } => list(available, &opts),
        NcclCommand::Fetch { versions, opts } => fetch(&versions, &opts),
        NcclCommand::Path { release, opts } => path(&release, &opts),
        NcclCommand::Clean { versions, yes } => clean(&versions, yes),
    }
}

fn releases(vs: &[String]) -> Result<Vec<Release>> {
    let mut bad = Vec::new();
    let mut out = Vec::new();
    for v in vs {
        match Release::parse(v) {
            Some(r) => out.push(r),
            None => bad.push(format!("{v:?} is not an NCCL release (e.g. 2.22.3 or 2.25.1.post1)")),
        }
    }
    crate::error::usage(bad)?;
    Ok(out)
}

fn fetcher(opts: &NcclOpts) -> Result<Fetcher> {
    if let Some(m) = opts.cuda.filter(|m| !(11..=99).contains(m)) {
        return Err(crate::error::usage_one(format!("--cuda {m}: give a CUDA major such as 12 or 13")));
    }
    Fetcher::new(opts.options()).fetch()
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

fn list(available: bool, opts: &NcclOpts) -> Result<u8> {
    let f = fetcher(opts)?;
    let (entries, problems) = f.cache.list();
    let mut s = String::new();
    if entries.is_empty() {
        s.push_str(&format!("cache {}: empty\n", f.cache.root().display()));
    } else {
        s.push_str(&format!("cache {}:\n", f.cache.root().display()));
        for e in &entries {
            let m = &e.meta;
            let cuda = m.nccl_cuda.as_deref().map(|c| format!("+cuda{c}")).unwrap_or_default();
            s.push_str(&format!(
                "  {:<14} cu{}  NCCL {}{cuda}  {:>9}  {} ({}, sha256 {}...)  {}\n",
                m.release,
                m.cuda_major,
                m.nccl_version,
                mb(m.lib_bytes),
                m.wheel,
                m.via,
                &m.wheel_sha256.get(..12).unwrap_or(""),
                e.lib.display()
            ));
        }
    }
    for p in &problems {
        s.push_str(&format!("  not an entry: {p}\n"));
    }
    if available {
        if opts.offline {
            return Err(crate::error::usage_one("--available asks the package index, which --offline forbids"));
        }
        // Without --cuda or a driver: both current majors.
        let majors = f.majors().unwrap_or_else(|_| vec![13, 12]);
        for m in majors {
            let Some(w) = f.available(m).fetch()? else { continue };
            let pkg = index::package(m);
            s.push_str(&format!("{pkg} on {} ({} releases for {}):\n", f.index_url(), w.len(), index::host_arch()));
            for (r, file) in &w {
                let cached = if f.cache.get(*r, m).is_some() { "  cached" } else { "" };
                let size = file.size.map(mb).unwrap_or_else(|| "?".into());
                s.push_str(&format!("  {:<14} wheel {:>9}{cached}\n", r.to_string(), size));
            }
        }
    }
    crate::output::print(&s)?;
    Ok(crate::exit::OK)
}

fn fetch(versions: &[String], opts: &NcclOpts) -> Result<u8> {
    let rs = releases(versions)?;
    let f = fetcher(opts)?;
    let mut failed = Vec::new();
    let mut out = String::new();
    for r in rs {
        match f.get(r) {
            Ok((e, got)) => {
                let how = match got {
                    Got::Cached => "already cached",
                    Got::Downloaded => "fetched",
                };
                out.push_str(&format!("{}-cu{} {} ({how})\n", e.meta.release, e.meta.cuda_major, e.lib.display()));
            }
            Err(e) => failed.push((r, e)),
        }
    }
    crate::output::print(&out)?;
    match failed.len() {
        0 => Ok(crate::exit::OK),
        1 => Err(failed.remove(0).1).fetch(),
        n => {
            let text: Vec<String> = failed.iter().map(|(r, e)| format!("{r}: {e:#}")).collect();
            Err(anyhow::anyhow!("{n} releases could not be fetched:\n{}", text.join("\n"))).fetch()
        }
    }
}

/// The cached library of a release; never a download (a `$(epdoctor nccl path X)` in a script
/// must not fetch 200 MB unasked): an uncached release says how to fetch it.
fn path(version: &str, opts: &NcclOpts) -> Result<u8> {
    let r = releases(&[version.to_string()])?[0];
    let f = fetcher(&NcclOpts { offline: true, ..opts.clone() })?;
    let (e, _) = f
        .get(r)
        .map_err(|_| {
            anyhow::anyhow!(
                "NCCL {r} is not in the cache; `nccl path` never downloads: run `epdoctor nccl fetch {r}{}` first",
                opts.cuda.map(|m| format!(" --cuda {m}")).unwrap_or_default()
            )
        })
        .fetch()?;
    crate::output::print(&format!("{}\n", e.lib.display()))?;
    Ok(crate::exit::OK)
}

/// Removes cached releases only with `yes`; without it, says what would go (as `env --clean`).
fn clean(versions: &[String], yes: bool) -> Result<u8> {
    let rs = releases(versions)?;
    let c = Cache::from_env().fetch()?;
    if !yes {
        let named: Vec<String> =
            c.cleanable(&rs).iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
        if named.is_empty() {
            crate::output::print(&format!("nothing to remove in {}\n", c.root().display()))?;
            return Ok(crate::exit::OK);
        }
        return Err(crate::error::usage_one(format!(
            "nccl clean would remove {} from {}; pass --yes to remove {}",
            named.join(", "),
            c.root().display(),
            if named.len() == 1 { "it" } else { "them" }
        )));
    }
    let gone = c.clean(&rs)?;
    let mut s = String::new();
    if gone.is_empty() {
        s.push_str(&format!("nothing to remove in {}\n", c.root().display()));
    }
    let total: u64 = gone.iter().map(|g| g.1).sum();
    for (p, b) in &gone {
        s.push_str(&format!("removed {} ({})\n", p.display(), mb(*b)));
    }
    if gone.len() > 1 {
        s.push_str(&format!("{} freed\n", mb(total)));
    }
    crate::output::print(&s)?;
    Ok(crate::exit::OK)
}
