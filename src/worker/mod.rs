//! One rank of the built-in intranode workload, and the `kernels` command.
//!
//! A rank: CUDA context on GPU `rank % gpus`, IPC buffers from plain cuMemAlloc, handles
//! all-gathered over an NCCL communicator, K iterations of notify + dispatch + combine checked
//! against a CPU reference, a bandwidth pass against a device-to-device copy, then one of the
//! teardown modes. Every event is a `[epdoctor] rank=R ...` line on stdout (docs/workload.md).

pub mod kernels;
pub(crate) mod libs;
mod nccl;
mod rendezvous;
mod teardown;
pub mod workload;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use cudarc::driver::sys::{CUdevice_attribute as Attr, CUdeviceptr, CUevent, CUfunction, CUstream};

use crate::model::version::boundary::{NCCL_FINALIZE, NCCL_MULTI_RANK_GPU};
use crate::model::version::Version;
use crate::sys::cuda::{self as cu, CuError};
use crate::sys::markers;
use nccl::NcclFail;
use rendezvous::Rendezvous;
use workload::{Layout, Shape, SignalLayout};

/// Exit status of a rank whose workload or teardown reported a failure. 0 is success; 2 (usage
/// error, missing library) comes from src/exit.rs; a killed rank has no status of its own.
pub const FAILED: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teardown {
    Clean,
    Abort,
    Leak,
    EarlyExit,
    KillPeer,
    KillInflight,
    FreeBeforeClose,
    NoBarrier,
}

impl Teardown {
    pub const ALL: [Teardown; 8] = [
        Teardown::Clean,
        Teardown::Abort,
        Teardown::Leak,
        Teardown::EarlyExit,
        Teardown::KillPeer,
        Teardown::KillInflight,
        Teardown::FreeBeforeClose,
        Teardown::NoBarrier,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Teardown::Clean => "clean",
            Teardown::Abort => "abort",
            Teardown::Leak => "leak",
            Teardown::EarlyExit => "early-exit",
            Teardown::KillPeer => "kill-peer",
            Teardown::KillInflight => "kill-inflight",
            Teardown::FreeBeforeClose => "free-before-close",
            Teardown::NoBarrier => "no-barrier",
        }
    }

    pub fn parse(s: &str) -> Result<Teardown> {
        Teardown::ALL.into_iter().find(|m| m.name() == s).with_context(|| {
            let names: Vec<_> = Teardown::ALL.iter().map(|m| m.name()).collect();
            format!("--teardown {s}: unknown mode; one of {}", names.join(", "))
        })
    }

    /// Modes whose story needs a last rank and at least one other.
    fn needs_peer(self) -> bool {
        matches!(self, Teardown::EarlyExit | Teardown::KillPeer | Teardown::KillInflight | Teardown::FreeBeforeClose)
    }
}

struct Timeouts {
    barrier: Duration,
    rendezvous: Duration,
    inflight: Duration,
}

impl Timeouts {
    fn from_env() -> Result<Self> {
        Ok(Self {
            barrier: rendezvous::env_secs("EPDOCTOR_BARRIER_TIMEOUT", 5.0)?,
            rendezvous: rendezvous::env_secs("EPDOCTOR_RENDEZVOUS_TIMEOUT", 120.0)?,
            inflight: rendezvous::env_secs("EPDOCTOR_INFLIGHT_TIMEOUT", 15.0)?,
        })
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The marker and result lines, flushed one by one (a rank may be SIGKILLed right after).
struct Out {
    rank: usize,
}

impl Out {
    fn print(&self, line: String) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    }
    fn line(&self, s: impl std::fmt::Display) {
        self.print(markers::line(self.rank, s));
    }
    fn phase(&self, p: &str) {
        self.print(markers::phase(self.rank, p, unix_now()));
    }
    fn note(&self, text: &str) {
        self.print(markers::note(self.rank, text));
    }
    /// `error=<stage> code=<name>` on stdout, the whole chain on stderr; returns FAILED.
    fn fail(&self, stage: &str, e: &anyhow::Error) -> u8 {
        self.line(format_args!("error={stage} code={}", short_code(e)));
        eprintln!("epdoctor worker rank {}: {stage} failed: {e:#}", self.rank);
        FAILED
    }
}

/// The CUDA or NCCL result name inside an error chain, for a space-free marker value.
fn short_code(e: &anyhow::Error) -> String {
    for c in e.chain() {
        if let Some(cu) = c.downcast_ref::<CuError>() {
            return cu.name();
        }
        if let Some(n) = c.downcast_ref::<NcclFail>() {
            return n.name.clone();
        }
    }
    "error".into()
}

/// The built-in workload's size (DeepEP's test size by default).
#[derive(Debug, Clone, Copy)]
pub struct Size {
    pub tokens: usize,
    pub hidden: usize,
    pub experts: usize,
    pub topk: usize,
    pub iters: usize,
}

/// One rank of the workload, as `repro` starts it.
#[derive(Debug, Clone)]
pub struct Config {
    /// None: from the launcher's environment (SLURM_PROCID / RANK and their world sizes).
    pub rank: Option<usize>,
    pub world: Option<usize>,
    /// Folder shared by the ranks of one cell (NCCL id and IPC handle files).
    pub rendezvous: PathBuf,
    pub teardown: String,
    /// libnccl.so to load instead of the loader's choice.
    pub nccl_lib: Option<PathBuf>,
    pub size: Size,
}

pub fn run(args: &Config) -> Result<u8> {
    let mode = Teardown::parse(&args.teardown)?;
    let (rank, world) = rendezvous::place(args.rank, args.world)?;
    let shape = Shape {
        world,
        tokens: args.size.tokens,
        hidden: args.size.hidden,
        experts: args.size.experts,
        topk: args.size.topk,
    };
    shape.validate().map_err(anyhow::Error::msg)?;
    if rank >= world {
        bail!("--rank {rank} is out of range for --world {world} (ranks are 0..{})", world - 1);
    }
    if mode.needs_peer() && world < 2 {
        bail!("--teardown {} needs --world 2 or more (a last rank and at least one other)", mode.name());
    }
    if args.size.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let timeouts = Timeouts::from_env()?;
    rendezvous::ensure_dir(&args.rendezvous)?;

    // Which libnccl: --nccl-lib, else what cudarc finds, else the runtime soname. May re-exec.
    let requested = args.nccl_lib.as_deref().map(libs::requested_lib).transpose()?;
    let chosen = requested.clone().or_else(|| {
        // SAFETY: only dlopen/dlclose of candidate names.
        (!unsafe { cudarc::nccl::sys::is_culib_present() }).then(libs::find_runtime_nccl).flatten()
    });
    if let Some(lib) = &chosen {
        libs::ensure_nccl_lib(lib, &args.rendezvous.join(format!("nccl-lib-r{rank}")))?;
    }
    libs::check_present(true)?;

    let out = Out { rank };
    out.phase("init");
    let nccl_version = nccl::version_of(nccl::version_code().map_err(|e| anyhow::anyhow!("{e}"))?);
    if nccl_version < NCCL_FINALIZE {
        bail!("NCCL {nccl_version} is too old: the workload needs ncclCommFinalize (NCCL 2.14 or newer)");
    }
    let loaded = libs::loaded_nccl_files();
    if let Some(req) = &requested {
        let hit = loaded.iter().any(|p| std::fs::canonicalize(p).is_ok_and(|c| &c == req));
        if !hit || loaded.len() != 1 {
            bail!(
                "--nccl-lib {}: the process mapped {:?} instead; another libnccl on the loader path took precedence",
                req.display(),
                loaded
            );
        }
    }
    let lib_shown = loaded.first().map(|p| p.display().to_string()).unwrap_or_else(|| "unknown".into());
    out.line(format_args!("nccl_version={} nccl_lib={}", nccl_version, lib_shown.replace(' ', "%20")));

    let mut w = match Worker::init(args, shape, mode, timeouts, &out, nccl_version) {
        Ok(w) => w,
        Err(e) => return Ok(out.fail("init", &e)),
    };
    out.phase("work");
    let check_ok = match w.work() {
        Ok(ok) => ok,
        Err(e) => return Ok(out.fail("work", &e)),
    };
    let code = w.teardown();
    Ok(if check_ok { code } else { FAILED })
}

struct Kernels {
    module: cu::Module,
    notify: CUfunction,
    dispatch: CUfunction,
    combine: CUfunction,
    barrier: CUfunction,
}

/// Device buffers this rank allocated itself.
struct Bufs {
    x: CUdeviceptr,
    topk_idx: CUdeviceptr,
    topk_w: CUdeviceptr,
    mask: CUdeviceptr,
    pos: CUdeviceptr,
    meta: CUdeviceptr,
    status: CUdeviceptr,
    out: CUdeviceptr,
    reduce: CUdeviceptr, // [0] total received rows (all-reduce result), [1] all-reduce input
    handles_send: CUdeviceptr,
    handles_recv: CUdeviceptr,
    peer_data_tab: CUdeviceptr,
    peer_signal_tab: CUdeviceptr,
    scratch: Option<CUdeviceptr>,
    /// Exported over IPC.
    data: CUdeviceptr,
    signal: CUdeviceptr,
}

impl Bufs {
    fn locals(&self) -> Vec<CUdeviceptr> {
        let mut v = vec![
            self.x,
            self.topk_idx,
            self.topk_w,
            self.mask,
            self.pos,
            self.meta,
            self.status,
            self.out,
            self.reduce,
            self.handles_send,
            self.handles_recv,
            self.peer_data_tab,
            self.peer_signal_tab,
        ];
        v.extend(self.scratch);
        v
    }
}

#[derive(Default)]
struct PhaseTimes {
    n: usize,
    notify: f64,
    allreduce: f64,
    dispatch: f64,
    barrier: f64,
    combine: f64,
    wall: f64,
}

struct Worker<'a> {
    out: &'a Out,
    me: usize,
    shape: Shape,
    mode: Teardown,
    iters: usize,
    timeouts: Timeouts,
    rdv: Rendezvous,
    sms: i32,
    shared_gpu: bool,
    stream: CUstream,
    k: Kernels,
    comm: nccl::Comm,
    b: Bufs,
    peer_data: Vec<CUdeviceptr>,
    peer_signal: Vec<CUdeviceptr>,
    data_freed: bool,
    notify_epoch: u32,
    barrier_epoch: u32,
    ev: [CUevent; 6],
    host_x: Vec<u16>,
    host_idx: Vec<i32>,
    host_w: Vec<f32>,
    layouts: Vec<Layout>,
    /// The combined output that passed the check (compared again after free-before-close).
    host_out: Vec<u16>,
    times: PhaseTimes,
}

/// The GPU this rank runs on (`rank % gpus`), with its context made current and its line printed.
struct Gpu {
    count: i32,
    major: i32,
    minor: i32,
    sms: i32,
}

impl Gpu {
    fn open(out: &Out) -> Result<Gpu> {
        cu::init()?;
        let count = cu::device_count()?;
        if count < 1 {
            bail!("no CUDA device is visible (CUDA_VISIBLE_DEVICES={:?})", std::env::var("CUDA_VISIBLE_DEVICES").ok());
        }
        let ordinal = (out.rank % count as usize) as i32;
        let dev = cu::device(ordinal)?;
        let (major, minor) = (
            cu::attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            cu::attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let sms = cu::attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let drv = cu::driver_version()?;
        let name = cu::device_name(dev)?.replace(' ', "_");
        let bus = cu::pci_bus_id(dev)?;
        cu::primary_context(dev)?;
        out.line(format_args!(
            "gpu={ordinal} gpus={count} name={name} cc={major}.{minor} sms={sms} bus={bus} cuda_driver={}.{}",
            drv / 1000,
            drv % 1000 / 10
        ));
        if major < 7 {
            bail!("GPU {ordinal} has compute capability {major}.{minor}; the kernels need 7.0 or newer");
        }
        Ok(Gpu { count, major, minor, sms })
    }
}

/// Several ranks on one GPU: NCCL needs to be told (see docs/workload.md). Sets the variable that
/// tells it, unless the user did, prints which transport the ranks get, and returns whether they
/// share a GPU.
fn shared_gpu_transport(out: &Out, world: usize, gpus: i32, nccl_version: Version) -> bool {
    let shared_gpu = world > gpus as usize;
    let per_gpu = world.div_ceil(gpus as usize);
    let user_set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
    if !shared_gpu {
        out.line(format_args!("transport=intranode ranks_per_gpu=1"));
    } else if nccl_version >= NCCL_MULTI_RANK_GPU {
        let how = if user_set("NCCL_MULTI_RANK_GPU_ENABLE") {
            "user".to_string()
        } else {
            std::env::set_var("NCCL_MULTI_RANK_GPU_ENABLE", "1");
            "NCCL_MULTI_RANK_GPU_ENABLE=1".to_string()
        };
        out.line(format_args!("transport=intranode-shared-gpu ranks_per_gpu={per_gpu} set_env={how}"));
        out.note("ranks share a GPU as real local ranks of one node (NCCL >= 2.30.3): P2P transport and proxy connections between them, as on a multi-GPU node");
    } else {
        let how = if user_set("NCCL_HOSTID") {
            "user".to_string()
        } else {
            let v = format!("epdoctor-rank{}", out.rank);
            std::env::set_var("NCCL_HOSTID", &v);
            format!("NCCL_HOSTID={v}")
        };
        out.line(format_args!("transport=net-socket ranks_per_gpu={per_gpu} set_env={how}"));
        out.note("NCCL before 2.30.3 refuses two ranks of one communicator on one GPU (Duplicate GPU detected); with a different NCCL_HOSTID per rank it treats them as separate nodes and talks over NET/Socket: NCCL's transport here is NOT the intranode one (no P2P/SHM, no local proxy connections); the CUDA IPC kernels are unaffected");
    }
    shared_gpu
}

impl Kernels {
    /// NVRTC for this device's architecture, cached.
    fn load(out: &Out, major: i32, minor: i32) -> Result<Kernels> {
        let arch = format!("sm_{major}{minor}");
        let unit = "kernels/intranode.cu";
        let compiled = kernels::compile(unit, &arch, true)?;
        let (nv_major, nv_minor) = kernels::nvrtc_version()?;
        out.line(format_args!(
            "kernels={} arch={arch} nvrtc={nv_major}.{nv_minor} compile_s={:.3}",
            compiled.origin, compiled.secs
        ));
        let module = cu::Module::load_ptx(&compiled.ptx)?;
        Ok(Kernels {
            notify: module.function("ep_notify")?,
            dispatch: module.function("ep_dispatch")?,
            combine: module.function("ep_combine")?,
            barrier: module.function("ep_barrier")?,
            module,
        })
    }
}

impl Bufs {
    /// Every device buffer of one rank, with this rank's inputs copied in and the flags zeroed.
    fn alloc(shape: &Shape, host_x: &[u16], host_idx: &[i32], host_w: &[f32]) -> Result<Bufs> {
        let (t, world, el) = (shape.tokens, shape.world, shape.experts_per_rank());
        let sig = SignalLayout::new(world, el);
        let b = Bufs {
            x: cu::alloc(t * shape.row_bytes())?,
            topk_idx: cu::alloc(t * shape.topk * 4)?,
            topk_w: cu::alloc(t * shape.topk * 4)?,
            mask: cu::alloc(t * 4)?,
            pos: cu::alloc(t * world * 4)?,
            meta: cu::alloc(workload::meta_len(shape) * 4)?,
            status: cu::alloc(4)?,
            out: cu::alloc(t * shape.row_bytes())?,
            reduce: cu::alloc(8)?,
            handles_send: cu::alloc(2 * cu::IPC_HANDLE_BYTES)?,
            handles_recv: cu::alloc(2 * cu::IPC_HANDLE_BYTES * world)?,
            peer_data_tab: cu::alloc(8 * world)?,
            peer_signal_tab: cu::alloc(8 * world)?,
            scratch: None,
            data: cu::alloc(shape.data_bytes())?,
            signal: cu::alloc(sig.words * 4)?,
        };
        cu::htod(b.x, host_x)?;
        cu::htod(b.topk_idx, host_idx)?;
        cu::htod(b.topk_w, host_w)?;
        cu::memset(b.status, 0, 4)?;
        cu::memset(b.reduce, 0, 8)?;
        // Zeroed before any peer can see the handles: flags start below every epoch.
        cu::memset(b.signal, 0, sig.words * 4)?;
        cu::memset(b.data, 0, shape.data_bytes())?;
        Ok(b)
    }
}

/// NCCL's unique id: rank 0 publishes it in the rendezvous folder; everyone else waits for it.
fn nccl_id(rdv: &Rendezvous) -> Result<Vec<u8>> {
    if rdv.rank == 0 {
        if rdv.path(rendezvous::NCCL_ID_FILE).exists() {
            bail!(
                "{} already holds an NCCL id from an earlier run: give every run a fresh --rendezvous folder",
                rdv.dir.display()
            );
        }
        let id = nccl::unique_id()?;
        rdv.write(rendezvous::NCCL_ID_FILE, &id)?;
        return Ok(id.to_vec());
    }
    let id = rdv.wait_read(rendezvous::NCCL_ID_FILE, "rank 0's NCCL unique id")?;
    if id.len() != nccl::UNIQUE_ID_BYTES {
        bail!(
            "{}: {} bytes, expected {}",
            rdv.path(rendezvous::NCCL_ID_FILE).display(),
            id.len(),
            nccl::UNIQUE_ID_BYTES
        );
    }
    Ok(id)
}

/// Every rank's data and signal buffers, opened from the IPC handles all-gathered over the
/// communicator itself (this rank's own buffers at its index).
fn open_peers(
    out: &Out,
    comm: &nccl::Comm,
    b: &Bufs,
    (data_h, signal_h): (&[u8], &[u8]),
    world: usize,
    stream: CUstream,
) -> Result<(Vec<CUdeviceptr>, Vec<CUdeviceptr>)> {
    let me = out.rank;
    let mut mine = [0u8; 2 * cu::IPC_HANDLE_BYTES];
    mine[..cu::IPC_HANDLE_BYTES].copy_from_slice(data_h);
    mine[cu::IPC_HANDLE_BYTES..].copy_from_slice(signal_h);
    cu::htod(b.handles_send, &mine)?;
    comm.all_gather_bytes(b.handles_send, b.handles_recv, mine.len(), stream)?;
    cu::stream_sync(stream)?;
    let mut all = vec![0u8; mine.len() * world];
    cu::dtoh(&mut all, b.handles_recv)?;
    let mut peer_data = vec![0; world];
    let mut peer_signal = vec![0; world];
    let t0 = Instant::now();
    for r in 0..world {
        let h = &all[r * mine.len()..(r + 1) * mine.len()];
        if r == me {
            if h != mine {
                bail!("the all-gathered IPC handles do not hold this rank's own handles at index {me}");
            }
            peer_data[r] = b.data;
            peer_signal[r] = b.signal;
        } else {
            peer_data[r] =
                cu::ipc_open(&h[..cu::IPC_HANDLE_BYTES]).with_context(|| format!("opening rank {r}'s data buffer"))?;
            peer_signal[r] = cu::ipc_open(&h[cu::IPC_HANDLE_BYTES..])
                .with_context(|| format!("opening rank {r}'s signal buffer"))?;
        }
    }
    out.line(format_args!("ipc_open=ok ipc_open_s={:.6} peers={}", t0.elapsed().as_secs_f64(), world - 1));
    Ok((peer_data, peer_signal))
}

impl<'a> Worker<'a> {
    fn init(
        args: &Config,
        shape: Shape,
        mode: Teardown,
        timeouts: Timeouts,
        out: &'a Out,
        nccl_version: Version,
    ) -> Result<Self> {
        let me = out.rank;
        let world = shape.world;
        let rdv = Rendezvous { dir: args.rendezvous.clone(), rank: me, world, timeout: timeouts.rendezvous };
        rdv.write_pid()?;

        let gpu = Gpu::open(out)?;
        let shared_gpu = shared_gpu_transport(out, world, gpu.count, nccl_version);
        let k = Kernels::load(out, gpu.major, gpu.minor)?;
        let sms = gpu.sms;
        let stream = cu::stream_create()?;

        // Inputs and the CPU layouts of every rank (needed to check what arrives).
        let host_x = workload::gen_x(me, &shape);
        let all_topk: Vec<_> = (0..world).map(|r| workload::gen_topk(r, &shape)).collect();
        let layouts: Vec<Layout> = all_topk.iter().map(|(i, _)| workload::layout(i, &shape)).collect();
        let (host_idx, host_w) = all_topk[me].clone();

        let b = Bufs::alloc(&shape, &host_x, &host_idx, &host_w)?;
        let data_h = cu::ipc_get(b.data)?;
        let signal_h = cu::ipc_get(b.signal)?;

        let id = nccl_id(&rdv)?;
        let t0 = Instant::now();
        let comm = nccl::init_rank(world, &id, me)?;
        out.line(format_args!("nccl_init=ok nccl_init_s={:.6}", t0.elapsed().as_secs_f64()));

        let (peer_data, peer_signal) = open_peers(out, &comm, &b, (&data_h, &signal_h), world, stream)?;
        cu::htod(b.peer_data_tab, &peer_data)?;
        cu::htod(b.peer_signal_tab, &peer_signal)?;

        let ev = [
            cu::event_create()?,
            cu::event_create()?,
            cu::event_create()?,
            cu::event_create()?,
            cu::event_create()?,
            cu::event_create()?,
        ];
        Ok(Worker {
            out,
            me,
            shape,
            mode,
            iters: args.size.iters,
            timeouts,
            rdv,
            sms,
            shared_gpu,
            stream,
            k,
            comm,
            b,
            peer_data,
            peer_signal,
            data_freed: false,
            notify_epoch: 0,
            barrier_epoch: 0,
            ev,
            host_x,
            host_idx,
            host_w,
            layouts,
            host_out: Vec::new(),
            times: PhaseTimes::default(),
        })
    }

    fn timeout_ns(&self) -> u64 {
        self.timeouts.barrier.as_nanos() as u64
    }

    fn warp_grid(&self) -> u32 {
        // One warp per token, 8 warps per block, enough blocks to fill every SM several times.
        (self.shape.tokens.div_ceil(8) as u32).clamp(1, (self.sms as u32) * 16)
    }

    fn launch_notify(&mut self) -> Result<()> {
        self.notify_epoch += 1;
        let s = &self.shape;
        let smem = ((s.experts + s.world) * 4) as u32;
        let a = cu::Args::new()
            .ptr(self.b.topk_idx)
            .i32(s.tokens as i32)
            .i32(s.topk as i32)
            .i32(s.world as i32)
            .i32(s.experts_per_rank() as i32)
            .i32(self.me as i32)
            .ptr(self.b.peer_signal_tab)
            .ptr(self.b.mask)
            .ptr(self.b.pos)
            .ptr(self.b.meta)
            .u32(self.notify_epoch)
            .u64(self.timeout_ns())
            .ptr(self.b.status);
        cu::launch(self.k.notify, 1, 1024, smem, self.stream, a)?;
        Ok(())
    }

    fn launch_dispatch(&self) -> Result<()> {
        let s = &self.shape;
        let a = cu::Args::new()
            .ptr(self.b.x)
            .ptr(self.b.pos)
            .ptr(self.b.meta)
            .i32(s.tokens as i32)
            .i32(s.hidden as i32)
            .i32(s.world as i32)
            .ptr(self.b.peer_data_tab)
            .u64(s.src_offset_bytes() as u64);
        cu::launch(self.k.dispatch, self.warp_grid(), 256, 0, self.stream, a)?;
        Ok(())
    }

    fn launch_combine(&self) -> Result<()> {
        let s = &self.shape;
        let a = cu::Args::new()
            .ptr(self.b.topk_idx)
            .ptr(self.b.topk_w)
            .ptr(self.b.pos)
            .ptr(self.b.meta)
            .i32(s.tokens as i32)
            .i32(s.hidden as i32)
            .i32(s.topk as i32)
            .i32(s.world as i32)
            .i32(s.experts_per_rank() as i32)
            .ptr(self.b.peer_data_tab)
            .ptr(self.b.out);
        cu::launch(self.k.combine, self.warp_grid(), 256, 0, self.stream, a)?;
        Ok(())
    }

    fn launch_barrier(&mut self) -> Result<()> {
        self.barrier_epoch += 1;
        let s = &self.shape;
        let a = cu::Args::new()
            .ptr(self.b.peer_signal_tab)
            .i32(s.world as i32)
            .i32(s.experts_per_rank() as i32)
            .i32(self.me as i32)
            .u32(self.barrier_epoch)
            .u64(self.timeout_ns())
            .ptr(self.b.status);
        cu::launch(self.k.barrier, 1, 32, 0, self.stream, a)?;
        Ok(())
    }

    fn read_status(&self) -> Result<u32> {
        let mut st = [0u32];
        cu::dtoh(&mut st, self.b.status)?;
        Ok(st[0])
    }

    fn status_error(&self, st: u32) -> Option<String> {
        let secs = self.timeouts.barrier.as_secs_f64();
        if st & 1 != 0 {
            Some(format!("the notify wait timed out after {secs} s: a peer never published its counts"))
        } else if st & 2 != 0 {
            Some(format!("the IPC barrier timed out after {secs} s: a peer never arrived"))
        } else {
            None
        }
    }

    /// notify, all-reduce of the received-row count, dispatch, barrier, combine.
    fn iteration(&mut self, last: bool) -> Result<()> {
        let s = self.shape;
        if last {
            // Stale results of earlier iterations must not pass the check.
            cu::memset_async(self.b.data, 0xff, s.data_bytes(), self.stream)?;
            cu::memset_async(self.b.out, 0xff, s.tokens * s.row_bytes(), self.stream)?;
        }
        let wall = Instant::now();
        let ev = self.ev;
        cu::event_record(ev[0], self.stream)?;
        self.launch_notify()?;
        cu::event_record(ev[1], self.stream)?;
        let recv_total = self.b.meta + (2 * s.world * 4) as u64;
        self.comm.all_reduce_sum_i32(recv_total, self.b.reduce, 1, self.stream)?;
        cu::event_record(ev[2], self.stream)?;
        self.launch_dispatch()?;
        cu::event_record(ev[3], self.stream)?;
        self.launch_barrier()?;
        cu::event_record(ev[4], self.stream)?;
        self.launch_combine()?;
        cu::event_record(ev[5], self.stream)?;
        cu::stream_sync(self.stream)?;
        if let Some(e) = self.status_error(self.read_status()?) {
            bail!(e);
        }
        let ms = |a: usize, b: usize| cu::event_ms(ev[a], ev[b]).map(|v| v as f64);
        let t = &mut self.times;
        t.n += 1;
        t.notify += ms(0, 1)?;
        t.allreduce += ms(1, 2)?;
        t.dispatch += ms(2, 3)?;
        t.barrier += ms(3, 4)?;
        t.combine += ms(4, 5)?;
        t.wall += wall.elapsed().as_secs_f64() * 1e3;
        Ok(())
    }

    /// Average milliseconds of `reps` back-to-back runs of `f` on the stream, after one warm-up.
    fn time_ms(&mut self, reps: usize, f: &dyn Fn(&Self) -> Result<()>) -> Result<f64> {
        f(self)?;
        cu::event_record(self.ev[0], self.stream)?;
        for _ in 0..reps {
            f(self)?;
        }
        cu::event_record(self.ev[1], self.stream)?;
        cu::stream_sync(self.stream)?;
        Ok(cu::event_ms(self.ev[0], self.ev[1])? as f64 / reps as f64)
    }

    /// Dispatch and combine against a device-to-device copy of the same bytes, on the same GPU.
    /// Ranks that share a GPU take turns (the GPU time-slices between processes, so concurrent
    /// timings would mostly measure the sharing); ranks with a GPU each run together.
    fn bandwidth(&mut self) -> Result<()> {
        let rows: usize = self.layouts[self.me].counts.iter().sum();
        let bytes = rows * self.shape.row_bytes();
        let scratch = cu::alloc(bytes)?;
        self.b.scratch = Some(scratch);
        let world = self.shape.world;
        let turns: Vec<Option<usize>> = if self.shared_gpu { (0..world).map(Some).collect() } else { vec![None] };
        let reps = 5;
        let mut res = None;
        for (i, turn) in turns.iter().enumerate() {
            self.rdv.barrier(&format!("bw{i}"))?;
            if turn.is_none_or(|t| t == self.me) {
                let src = self.b.data;
                let copy = self.time_ms(reps, &|w: &Self| Ok(cu::dtod_async(scratch, src, bytes, w.stream)?))?;
                let disp = self.time_ms(reps, &|w: &Self| w.launch_dispatch())?;
                let comb = self.time_ms(reps, &|w: &Self| w.launch_combine())?;
                res = Some((copy, disp, comb));
            }
        }
        self.rdv.barrier("bw-end")?;
        let (copy, disp, comb) = res.context("no bandwidth turn ran on this rank")?;
        let gbps = |ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
        self.out.line(format_args!(
            "bw_mode={} bytes={bytes} rows={rows} copy_gbps={:.1} dispatch_gbps={:.1} combine_gbps={:.1} dispatch_vs_copy={:.2} combine_vs_copy={:.2} copy_us={:.1} dispatch_us={:.1} combine_us={:.1}",
            if self.shared_gpu { "solo" } else { "concurrent" },
            gbps(copy),
            gbps(disp),
            gbps(comb),
            copy / disp,
            copy / comb,
            copy * 1e3,
            disp * 1e3,
            comb * 1e3
        ));
        Ok(())
    }

    /// The K iterations, the bandwidth pass and the check. Ok(false) when the check failed.
    fn work(&mut self) -> Result<bool> {
        for _ in 1..self.iters {
            self.iteration(false)?;
        }
        if self.iters >= 2 {
            self.bandwidth()?;
        } else {
            self.out.line("bw_mode=skipped reason=iters<2");
        }
        self.iteration(true)?;
        let t = &self.times;
        let n = t.n.max(1) as f64;
        self.out.line(format_args!(
            "iters={} iter_ms={:.3} notify_us={:.1} allreduce_us={:.1} dispatch_us={:.1} barrier_us={:.1} combine_us={:.1}",
            t.n,
            t.wall / n,
            t.notify / n * 1e3,
            t.allreduce / n * 1e3,
            t.dispatch / n * 1e3,
            t.barrier / n * 1e3,
            t.combine / n * 1e3
        ));
        self.check()
    }

    fn check(&mut self) -> Result<bool> {
        let s = self.shape;
        let mut meta = vec![0i32; workload::meta_len(&s)];
        cu::dtoh(&mut meta, self.b.meta)?;
        let recv_total = meta[2 * s.world];
        if recv_total < 0 || recv_total as usize > s.max_recv() {
            self.out.line(format_args!("check=fail reason=recv_total={recv_total}"));
            return Ok(false);
        }
        let n = recv_total as usize;
        let mut recv_x = vec![0u16; n * s.hidden];
        cu::dtoh(&mut recv_x, self.b.data)?;
        let mut recv_src = vec![0i32; n];
        cu::dtoh(&mut recv_src, self.b.data + s.src_offset_bytes() as u64)?;
        let mut outv = vec![0u16; s.tokens * s.hidden];
        cu::dtoh(&mut outv, self.b.out)?;
        let mut red = [0i32; 1];
        cu::dtoh(&mut red, self.b.reduce)?;
        let obs = workload::Observed { meta: &meta, recv_x: &recv_x, recv_src: &recv_src, out: &outv };
        let rep = workload::check(self.me, &s, &self.layouts, &self.host_x, &self.host_idx, &self.host_w, &obs);
        let all_rows: usize = self.layouts.iter().map(|l| l.counts.iter().sum::<usize>()).sum();
        let reduce_ok = red[0] as i64 == all_rows as i64;
        self.host_out = outv;
        if rep.ok && reduce_ok {
            self.out.line(format_args!(
                "check=ok recv_rows={n} rows_checked={} max_abs_err={:.6} allreduce_rows={}",
                rep.rows_checked, rep.max_abs_err, red[0]
            ));
            Ok(true)
        } else {
            let why = rep
                .failure
                .clone()
                .unwrap_or_else(|| format!("the all-reduce gave {} rows, expected {all_rows}", red[0]));
            self.out
                .line(format_args!("check=fail rows_checked={} max_abs_err={:.6}", rep.rows_checked, rep.max_abs_err));
            self.out.note(&format!("check failed: {why}"));
            Ok(false)
        }
    }
}

pub(crate) fn ptx_path(dir: &Path, unit: &str, arch: &str) -> std::path::PathBuf {
    let stem = Path::new(unit).file_stem().and_then(|s| s.to_str()).unwrap_or("kernel");
    dir.join(format!("{stem}.{arch}.ptx"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_and_unknown_lists_all() {
        for m in Teardown::ALL {
            assert_eq!(Teardown::parse(m.name()).unwrap(), m);
        }
        let e = Teardown::parse("nuke").unwrap_err().to_string();
        assert!(e.contains("clean") && e.contains("free-before-close") && e.contains("nuke"), "{e}");
    }
}
