//! What NCCL, PyTorch and the NVIDIA driver leave in the operating system, named once for `env`,
//! `clean` and repro's leftovers.

/// NCCL's shared-memory files: `/dev/shm/nccl-XXXXXX` (NCCL src/misc/shmutils.cc, mkstemp).
pub fn is_nccl_shm(name: &str) -> bool {
    name.starts_with("nccl-")
}

/// PyTorch's CPU-tensor sharing files: `/dev/shm/torch_*`.
pub fn is_torch_shm(name: &str) -> bool {
    name.starts_with("torch_")
}

/// The abstract sockets NCCL's UDS service binds, as /proc/net/unix shows them:
/// `@/tmp/nccl-socket-<rank>-<hash>`, and `@nccl-socket-...` in other releases
/// (NCCL src/misc/ipcsocket.cc, `USE_ABSTRACT_SOCKET`).
pub fn is_nccl_socket(path: &str) -> bool {
    path.starts_with("@/tmp/nccl-socket-") || path.starts_with("@nccl-socket-")
}

/// `/dev/nvidia0`..: one GPU. `/dev/nvidiactl` and `/dev/nvidia-uvm` are opened by any CUDA
/// process and say nothing about which GPU.
pub fn is_gpu_node(path: &str) -> bool {
    path.strip_prefix("/dev/nvidia").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Any NVIDIA device node (`/dev/nvidia*`): a process holding one has the driver open.
pub fn is_nvidia_node(path: &str) -> bool {
    path.starts_with("/dev/nvidia")
}

/// Helper processes that end by themselves once the processes they serve are gone, so one seen
/// alive a moment after the job is no leftover yet: Python's multiprocessing resource tracker
/// (`mp.spawn`, torch's DataLoader) and forkserver read a pipe from their clients and exit at its
/// end of file (CPython Lib/multiprocessing/resource_tracker.py `main`, forkserver.py `main`);
/// `semaphore_tracker` is the tracker's name before Python 3.8.
pub fn ends_on_its_own(cmd: &str) -> bool {
    [
        "from multiprocessing.resource_tracker import main",
        "from multiprocessing.forkserver import main",
        "from multiprocessing.semaphore_tracker import main",
    ]
    .iter()
    .any(|m| cmd.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_nccl_shm("nccl-AbC123") && !is_nccl_shm("torch_1") && is_torch_shm("torch_1"));
        assert!(is_nccl_socket("@/tmp/nccl-socket-0-2a3f") && is_nccl_socket("@nccl-socket-1-x"));
        assert!(!is_nccl_socket("/tmp/nccl-socket-0") && !is_nccl_socket("@/run/x"));
        assert!(is_gpu_node("/dev/nvidia0") && is_gpu_node("/dev/nvidia13"));
        for p in ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia", "/dev/null"] {
            assert!(!is_gpu_node(p), "{p}");
        }
        assert!(is_nvidia_node("/dev/nvidiactl") && !is_nvidia_node("/dev/null"));
        // The command line mp.spawn's tracker runs with (seen in a DeepEP cell on the H100).
        assert!(ends_on_its_own("python3 -B -c from multiprocessing.resource_tracker import main;main(3)"));
        assert!(ends_on_its_own(
            "/usr/bin/python3 -c from multiprocessing.forkserver import main; main(7, 8, ['__main__'])"
        ));
        assert!(!ends_on_its_own("python3 train.py --resource_tracker") && !ends_on_its_own("sleep 60"));
    }
}
