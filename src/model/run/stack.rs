//! A stack as frames, and its fold: the frames that say where a process waits
//! (`ncclCommDestroy <- ProcessGroupNCCL::shutdown <- destroy_process_group <- train.py:88`). The
//! harness folds the stacks it takes at a cell's deadline, the Flight Recorder reader the stack of
//! each collective it lists.

use std::sync::LazyLock;

use regex::Regex;

/// Frames kept before the caller's own line when a chain is long.
const MAX_FRAMES: usize = 8;

#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub func: String,
    /// `file.py:line` for a Python frame, the library for a native one.
    pub loc: Option<String>,
    pub python: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    pub tid: Option<i32>,
    pub name: String,
    /// Innermost first.
    pub frames: Vec<Frame>,
}

/// Native frames that say nothing about where a program waits: the C library, the interpreter
/// loop, binding glue.
fn is_noise(f: &Frame) -> bool {
    if f.python {
        return false;
    }
    let func = f.func.as_str();
    if func.is_empty() || func == "??" || func.starts_with("0x") || func == "running" {
        return true;
    }
    let lib = f.loc.as_deref().unwrap_or("");
    let lib_base = lib.rsplit('/').next().unwrap_or(lib);
    const NOISE_LIBS: &[&str] =
        &["libc.so", "libc-", "ld-linux", "libpthread", "libstdc++", "libgcc_s", "libpython", "kernel"];
    if NOISE_LIBS.iter().any(|n| lib_base.starts_with(n)) {
        // The kernel's wait is the whole story when nothing else is known (kept by fold).
        return true;
    }
    if lib_base.starts_with("python") && !lib_base.contains(".so") {
        return true;
    }
    const NOISE_FUNCS: &[&str] = &[
        "_Py",
        "Py",
        "pybind11::",
        "cfunction_",
        "method_vectorcall",
        "slot_tp_",
        "vectorcall",
        "_start",
        "__libc_",
        "start_thread",
        "clone",
        "__clone",
        "std::",
        "__GI_",
        "__pthread",
        "pthread_",
        "syscall",
        "__futex",
        "futex_",
        "do_futex",
        "__lll_",
        "__nptl",
        "torch::autograd::",
        "torch::PythonArgParser",
        "c10::impl::",
        "c10::Dispatcher",
        "c10::OperatorHandle",
        "at::_ops::",
        "wrap_",
        "THPVariable_",
    ];
    NOISE_FUNCS.iter().any(|n| func.starts_with(n)) && !func.contains("nccl")
}

/// Python frames of the interpreter's own library and of installed packages are named by their
/// function; the first frame of the user's own code ends the chain as `func (file.py:line)`.
fn is_library_python(loc: &str) -> bool {
    const LIB_DIRS: &[&str] = &[
        "torch/",
        "deep_ep/",
        "nvshmem/",
        "triton/",
        "numpy/",
        "multiprocessing/",
        "concurrent/",
        "importlib/",
        "asyncio/",
        "threading.py",
        "subprocess.py",
        "selectors.py",
        "queue.py",
        "socket.py",
        "runpy.py",
        "contextlib.py",
        "functools.py",
        "<frozen",
    ];
    // torch installed outside site-packages (`pip install --target DIR`): its own subpackages.
    const TORCH_DIRS: &[&str] =
        &["/torch/distributed/", "/torch/multiprocessing/", "/torch/cuda/", "/torch/nn/", "/torch/utils/"];
    loc.contains("site-packages/")
        || loc.contains("dist-packages/")
        || loc.contains("/lib/python3")
        || LIB_DIRS.iter().any(|d| loc.starts_with(d))
        || TORCH_DIRS.iter().any(|d| loc.contains(d))
}

/// `c10d::ProcessGroupNCCL::shutdown(std::string)` -> `ProcessGroupNCCL::shutdown`.
pub fn short_name(func: &str) -> String {
    // Arguments and template arguments, outermost only.
    let mut s = String::new();
    let (mut paren, mut angle) = (0i32, 0i32);
    for c in func.chars() {
        match c {
            '(' => paren += 1,
            ')' => paren -= 1,
            '<' if paren == 0 => angle += 1,
            '>' if paren == 0 && angle > 0 => angle -= 1,
            _ if paren == 0 && angle == 0 => s.push(c),
            _ => {}
        }
    }
    let s = s.split(" [clone").next().unwrap_or(&s).trim();
    let s = s.rsplit(' ').next().unwrap_or(s);
    // glibc's internal aliases: `__GI___wait4` is wait4.
    let s = s.strip_prefix("__GI___").or_else(|| s.strip_prefix("__GI_")).unwrap_or(s);
    // NCCL's profiling aliases: pncclCommFinalize is ncclCommFinalize.
    let s = s.strip_prefix('p').filter(|r| r.starts_with("nccl")).unwrap_or(s);
    let parts: Vec<&str> = s.split("::").filter(|p| !p.is_empty()).collect();
    if parts.len() > 2 {
        parts[parts.len() - 2..].join("::")
    } else {
        parts.join("::")
    }
}

/// Frames that say where a hang is even in a long chain: NCCL's API and its barriers, the process
/// group, NVSHMEM's finalize and barriers, DeepEP's buffer, the Python calls that wait.
static LANDMARK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"^nccl(?:Comm\w+|AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|Send|Recv|Group(?:Start|End))$",
        r"|^bootstrap\w*Barrier$|^ProcessGroupNCCL::|^nvshmem\w*(?:finalize|barrier)\w*$|^Buffer::",
        r"|^(?:destroy_process_group|barrier|all_reduce|synchronize|wait)$|Synchronize",
    ))
    .unwrap()
});

/// Innermost meaningful frame first, up to and including the caller's own line; a long chain is
/// cut to its innermost frame, its landmarks and its outermost frames.
pub fn fold(frames: &[Frame]) -> String {
    let (chain, user) = chain(frames);
    if chain.len() <= MAX_FRAMES {
        return chain.into_iter().chain(user).collect::<Vec<_>>().join(" <- ");
    }
    let last = chain.len() - 1;
    let keep: Vec<usize> = (0..chain.len()).filter(|&i| i == 0 || i == last || LANDMARK.is_match(&chain[i])).collect();
    let mut out: Vec<String> = Vec::new();
    for (n, &i) in keep.iter().enumerate() {
        if n > 0 && i != keep[n - 1] + 1 {
            out.push("...".into());
        }
        out.push(chain[i].clone());
    }
    out.extend(user);
    out.join(" <- ")
}

/// The whole chain, uncut (for stacks.log, which rules read).
pub fn fold_full(frames: &[Frame]) -> String {
    let (chain, user) = chain(frames);
    chain.into_iter().chain(user).collect::<Vec<_>>().join(" <- ")
}

fn chain(frames: &[Frame]) -> (Vec<String>, Option<String>) {
    let mut chain: Vec<String> = Vec::new();
    let mut user = None;
    for f in frames {
        if is_noise(f) {
            continue;
        }
        if f.python {
            let loc = f.loc.as_deref().unwrap_or("");
            if !is_library_python(loc) {
                // The caller's own frame keeps its function: `stuck_in_teardown (sleephang.py:6)`.
                let base = loc.rsplit('/').next().unwrap_or(loc);
                user = Some(match f.func.as_str() {
                    "" | "?" => base.to_string(),
                    func => format!("{func} ({base})"),
                });
                break;
            }
            if chain.last().map(String::as_str) != Some(f.func.as_str()) {
                chain.push(f.func.clone());
            }
            continue;
        }
        let n = short_name(&f.func);
        if !n.is_empty() && chain.last() != Some(&n) {
            chain.push(n);
        }
    }
    if chain.is_empty() && user.is_none() {
        // Nothing but noise: the innermost named frame (the kernel's wait, a libc call) is all there is.
        if let Some(f) = frames.iter().find(|f| !f.func.is_empty() && f.func != "??" && !f.func.starts_with("0x")) {
            chain.push(short_name(&f.func));
        }
    }
    (chain, user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(func: &str, loc: &str) -> Frame {
        Frame { func: func.into(), loc: Some(loc.into()), python: true }
    }
    fn native(func: &str, lib: &str) -> Frame {
        Frame { func: func.into(), loc: Some(lib.into()), python: false }
    }

    #[test]
    fn folds_to_what_matters() {
        let frames = vec![
            native("__futex_abstimed_wait_common", "libc.so.6"),
            native("0x7f00", "libnccl.so.2"),
            native("ncclCommDestroy", "libnccl.so.2"),
            native("c10d::NCCLComm::destroy()", "libtorch_cuda.so"),
            native("c10d::ProcessGroupNCCL::shutdown(std::optional<std::string>)", "libtorch_cuda.so"),
            native("pybind11::cpp_function::dispatcher", "libtorch_python.so"),
            native("_PyEval_EvalFrameDefault", "libpython3.12.so.1.0"),
            py("shutdown", "torch/distributed/distributed_c10d.py:2100"),
            py("destroy_process_group", "torch/distributed/distributed_c10d.py:2210"),
            py("rank_main", "train.py:88"),
            py("<module>", "train.py:120"),
        ];
        assert_eq!(
            fold(&frames),
            "ncclCommDestroy <- NCCLComm::destroy <- ProcessGroupNCCL::shutdown <- shutdown <- destroy_process_group <- rank_main (train.py:88)"
        );
    }

    #[test]
    fn only_noise_gives_the_innermost_wait() {
        let f = vec![native("futex_wait_queue", "kernel"), native("syscall futex", "kernel")];
        assert_eq!(fold(&f), "futex_wait_queue");
        assert_eq!(fold(&[]), "");
    }

    #[test]
    fn long_chains_are_cut_before_the_callers_line() {
        let mut f: Vec<Frame> = (0..20).map(|i| native(&format!("ncclStep{i}"), "libnccl.so.2")).collect();
        f.push(py("main", "job.py:3"));
        let s = fold(&f);
        assert_eq!(s, "ncclStep0 <- ... <- ncclStep19 <- main (job.py:3)");
        assert_eq!(fold_full(&f).matches(" <- ").count(), 20);
    }

    #[test]
    fn names() {
        assert_eq!(short_name("c10d::ProcessGroupNCCL::shutdown(std::string const&)"), "ProcessGroupNCCL::shutdown");
        assert_eq!(short_name("void std::vector<int, std::allocator<int> >::push_back(int)"), "vector::push_back");
        assert_eq!(short_name("ncclCommDestroy"), "ncclCommDestroy");
        assert_eq!(short_name("foo::bar() [clone .cold]"), "foo::bar");
        assert_eq!(short_name("__GI___wait4"), "wait4");
    }
}
