//! A rank's teardown: each step the workload's teardown modes are made of, with the marker lines
//! repro reads (`<step>=<ok|code> <step>_s=<seconds>`).

use std::time::Instant;

use super::*;

impl Worker<'_> {
    /// Run one step and print `<step>=<ok|code> <step>_s=<seconds> [extra]` (unique keys per
    /// step: the marker parsers keep a flat map); true when it succeeded.
    fn step(&self, name: &str, f: impl FnOnce() -> std::result::Result<String, String>) -> bool {
        let t0 = Instant::now();
        let r = f();
        self.report(name, t0, r)
    }

    fn report(&self, name: &str, t0: Instant, r: std::result::Result<String, String>) -> bool {
        let dt = t0.elapsed().as_secs_f64();
        match &r {
            Ok(extra) if extra.is_empty() => self.out.line(format_args!("{name}=ok {name}_s={dt:.6}")),
            Ok(extra) => self.out.line(format_args!("{name}=ok {name}_s={dt:.6} {extra}")),
            Err(code) => self.out.line(format_args!("{name}={code} {name}_s={dt:.6}")),
        }
        r.is_ok()
    }

    fn step_barrier(&mut self) -> bool {
        let t0 = Instant::now();
        let r = self.barrier_once();
        self.report("ipc_barrier", t0, r)
    }

    fn barrier_once(&mut self) -> std::result::Result<String, String> {
        cu::memset(self.b.status, 0, 4).map_err(|e| e.name())?;
        self.launch_barrier().map_err(|e| short_code(&e))?;
        cu::stream_sync(self.stream).map_err(|e| e.name())?;
        let st = self.read_status().map_err(|e| short_code(&e))?;
        if st & 2 != 0 {
            Err("timeout".into())
        } else {
            Ok(String::new())
        }
    }

    fn step_close(&self) -> bool {
        self.step("ipc_close", || {
            let mut first_err = None;
            let mut n = 0;
            for r in (0..self.shape.world).filter(|&r| r != self.me) {
                for p in [self.peer_data[r], self.peer_signal[r]] {
                    match cu::ipc_close(p) {
                        Ok(()) => n += 1,
                        Err(e) => {
                            first_err.get_or_insert(e.name());
                        }
                    }
                }
            }
            first_err.map_or(Ok(format!("closed={n}")), Err)
        })
    }

    fn step_free(&mut self) -> bool {
        let mut bufs = self.b.locals();
        bufs.push(self.b.signal);
        if !self.data_freed {
            bufs.push(self.b.data);
        }
        self.data_freed = true;
        self.step("free", || {
            let mut first_err = None;
            for p in &bufs {
                if let Err(e) = cu::free(*p) {
                    first_err.get_or_insert(e.name());
                }
            }
            if let Err(e) = self.k.module.unload() {
                first_err.get_or_insert(e.name());
            }
            first_err.map_or(Ok(format!("buffers={}", bufs.len())), Err)
        })
    }

    /// Finalize then destroy; if finalize fails the communicator is aborted instead.
    fn step_finalize_destroy(&self) -> bool {
        if self.step("nccl_finalize", || self.comm.finalize().map(|_| String::new()).map_err(|e| e.name)) {
            self.step("nccl_destroy", || self.comm.destroy().map(|_| String::new()).map_err(|e| e.name))
        } else {
            self.step_abort();
            false
        }
    }

    fn step_abort(&self) -> bool {
        self.step("nccl_abort", || self.comm.abort().map(|_| String::new()).map_err(|e| e.name))
    }

    fn clean_sequence(&mut self, barrier: bool) -> bool {
        let mut ok = true;
        if barrier {
            ok &= self.step_barrier();
        }
        ok &= self.step_close();
        ok &= self.step_free();
        ok &= self.step_finalize_destroy();
        ok
    }

    fn kill_self(&self, why: &str) -> ! {
        self.out.line(format_args!("action={why} signal=SIGKILL t={:.6}", unix_now()));
        let _ = std::io::stderr().flush();
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        // SIGKILL cannot be caught; this is only reached if raise itself failed.
        std::process::abort()
    }

    /// Survivor of kill-inflight: start an all-reduce the last rank never joins, wait for NCCL to
    /// notice (or the deadline), then abort.
    fn inflight_collective(&self) -> bool {
        self.step("inflight_allreduce", || {
            let send = self.b.reduce + 4;
            self.comm.all_reduce_sum_i32(send, send, 1, self.stream).map_err(|e| e.name)?;
            self.rdv.write(&format!("inflight-{}", self.me), b"").map_err(|_| "rendezvous-write-failed".to_string())?;
            let t0 = Instant::now();
            loop {
                match cu::stream_query(self.stream) {
                    Ok(true) => return Err("completed".into()),
                    Ok(false) => {}
                    Err(e) => return Err(e.name()),
                }
                match self.comm.async_error() {
                    Ok(None) => {}
                    Ok(Some(name)) => return Err(name),
                    Err(e) => return Err(e.name),
                }
                if t0.elapsed() > self.timeouts.inflight {
                    return Err("no-error-before-deadline".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    }

    /// Survivor of free-before-close: combine once more, reading the freed buffer through the
    /// still-open mapping, and compare with the checked result.
    fn read_after_free(&self) -> bool {
        self.step("read_after_free", || {
            self.rdv.wait_read("freed", "the last rank's 'freed' marker").map_err(|_| "no-freed-marker".to_string())?;
            self.launch_combine().map_err(|e| short_code(&e))?;
            cu::stream_sync(self.stream).map_err(|e| e.name())?;
            let mut outv = vec![0u16; self.host_out.len()];
            cu::dtoh(&mut outv, self.b.out).map_err(|e| e.name())?;
            let differs = outv.iter().zip(&self.host_out).filter(|(a, b)| a != b).count();
            if differs == 0 {
                Ok(String::new())
            } else {
                Err(format!("changed:{differs}-values"))
            }
        })
    }

    pub(super) fn teardown(&mut self) -> u8 {
        let out = self.out;
        let t0 = Instant::now();
        out.phase("teardown-start");
        out.line(format_args!("teardown={}", self.mode.name()));
        let last = self.me + 1 == self.shape.world;
        let ok = match self.mode {
            Teardown::Clean => self.clean_sequence(true),
            Teardown::NoBarrier => self.clean_sequence(false),
            Teardown::Abort => {
                let mut ok = self.step_barrier();
                ok &= self.step_close();
                ok &= self.step_free();
                ok & self.step_abort()
            }
            Teardown::Leak => {
                let ok = self.step_barrier();
                out.line("action=exit-with-communicator-and-mappings-open");
                ok
            }
            Teardown::EarlyExit if last => {
                out.line("action=exit-before-barrier");
                true
            }
            Teardown::KillPeer if last => self.kill_self("kill-self-after-work"),
            Teardown::KillInflight if last => {
                let others: Vec<_> = (0..self.me).collect();
                for r in others {
                    if let Err(e) =
                        self.rdv.wait_read(&format!("inflight-{r}"), &format!("rank {r} to start its all-reduce"))
                    {
                        eprintln!("epdoctor worker rank {}: {e:#}", self.me);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
                self.kill_self("kill-self-during-peers-allreduce")
            }
            Teardown::FreeBeforeClose if last => {
                let data = self.b.data;
                let mut ok =
                    self.step("free_exported_buffer", || cu::free(data).map(|_| String::new()).map_err(|e| e.name()));
                self.data_freed = true;
                if self.rdv.write("freed", b"").is_err() {
                    ok = false;
                }
                ok & self.clean_sequence(true)
            }
            Teardown::EarlyExit => self.clean_sequence(true),
            Teardown::KillPeer => {
                let last_rank = self.shape.world - 1;
                let gone = self.step("wait_peer_exit", || {
                    let pid = self.rdv.pid_of(last_rank).map_err(|_| "no-pid-file".to_string())?;
                    self.rdv
                        .wait_exited(pid)
                        .map(|_| format!("peer_pid={pid}"))
                        .map_err(|_| "still-running".to_string())
                });
                gone & self.clean_sequence(true)
            }
            Teardown::KillInflight => {
                let mut ok = self.inflight_collective();
                ok &= self.step_abort();
                ok &= self.step_close();
                ok & self.step_free()
            }
            Teardown::FreeBeforeClose => {
                let ok = self.read_after_free();
                ok & self.clean_sequence(true)
            }
        };
        out.line(format_args!(
            "teardown={} teardown_s={:.6} teardown_result={}",
            self.mode.name(),
            t0.elapsed().as_secs_f64(),
            if ok { "ok" } else { "failed" }
        ));
        out.phase("teardown-end");
        if ok {
            crate::exit::OK
        } else {
            FAILED
        }
    }
}
