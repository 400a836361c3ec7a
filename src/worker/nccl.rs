//! The NCCL communicator through cudarc's `nccl::result`/`sys` level: cudarc's safe `Comm` aborts
//! in its Drop, and the teardown modes need every call to be explicit.

use std::ffi::{c_void, CStr};

use cudarc::driver::sys::{CUdeviceptr, CUstream};
use cudarc::nccl::{result, sys};

use crate::model::version::Version;

/// A failed NCCL call, by result name (e.g. ncclRemoteError), plus ncclGetLastError's text.
#[derive(Debug, Clone)]
pub struct NcclFail {
    pub call: &'static str,
    pub name: String,
    pub detail: String,
}

impl std::fmt::Display for NcclFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.call, self.name)?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for NcclFail {}

pub fn result_name(r: sys::ncclResult_t) -> String {
    format!("{r:?}")
}

fn last_error(comm: sys::ncclComm_t) -> String {
    // SAFETY: returns a static or per-thread string (may be empty).
    let p = unsafe { sys::ncclGetLastError(comm) };
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().trim().to_string()
}

fn ck(
    call: &'static str,
    comm: sys::ncclComm_t,
    r: Result<result::NcclStatus, result::NcclError>,
) -> Result<(), NcclFail> {
    match r {
        Ok(_) => Ok(()),
        Err(e) => Err(NcclFail { call, name: result_name(e.0), detail: last_error(comm) }),
    }
}

/// The version code the loaded library reports (e.g. 22803).
pub fn version_code() -> Result<i32, NcclFail> {
    result::get_nccl_version().map_err(|e| NcclFail {
        call: "ncclGetVersion",
        name: result_name(e.0),
        detail: String::new(),
    })
}

/// 2.28.3 from 22803 (and the pre-2.9 encoding, 2804 -> 2.8.4).
pub fn version_of(code: i32) -> Version {
    let c = code.max(0) as u32;
    if c >= 20900 {
        Version(c / 10000, c % 10000 / 100, c % 100)
    } else {
        Version(c / 1000, c % 1000 / 100, c % 100)
    }
}

pub const UNIQUE_ID_BYTES: usize = 128;

pub fn unique_id() -> Result<[u8; UNIQUE_ID_BYTES], NcclFail> {
    let id = result::get_uniqueid().map_err(|e| NcclFail {
        call: "ncclGetUniqueId",
        name: result_name(e.0),
        detail: last_error(std::ptr::null_mut()),
    })?;
    let mut out = [0u8; UNIQUE_ID_BYTES];
    for (o, c) in out.iter_mut().zip(id.internal.iter()) {
        *o = *c as u8;
    }
    Ok(out)
}

pub struct Comm(pub sys::ncclComm_t);

pub fn init_rank(world: usize, id: &[u8], rank: usize) -> Result<Comm, NcclFail> {
    let mut uid = sys::ncclUniqueId { internal: [0; UNIQUE_ID_BYTES] };
    for (c, b) in uid.internal.iter_mut().zip(id) {
        *c = *b as std::ffi::c_char;
    }
    let mut comm: sys::ncclComm_t = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; blocking init.
    let r = unsafe { result::comm_init_rank(&mut comm, world as i32, uid, rank as i32) };
    ck("ncclCommInitRank", comm, r)?;
    Ok(Comm(comm))
}

fn stream(s: CUstream) -> sys::cudaStream_t {
    s as sys::cudaStream_t
}

impl Comm {
    pub fn all_gather_bytes(
        &self,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        bytes: usize,
        s: CUstream,
    ) -> Result<(), NcclFail> {
        // SAFETY: device buffers of `bytes` and `world * bytes`.
        let r = unsafe {
            result::all_gather(
                send as *const c_void,
                recv as *mut c_void,
                bytes,
                sys::ncclDataType_t::ncclUint8,
                self.0,
                stream(s),
            )
        };
        ck("ncclAllGather", self.0, r)
    }

    pub fn all_reduce_sum_i32(
        &self,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: usize,
        s: CUstream,
    ) -> Result<(), NcclFail> {
        // SAFETY: device buffers of `count` int32.
        let r = unsafe {
            result::all_reduce(
                send as *const c_void,
                recv as *mut c_void,
                count,
                sys::ncclDataType_t::ncclInt32,
                sys::ncclRedOp_t::ncclSum,
                self.0,
                stream(s),
            )
        };
        ck("ncclAllReduce", self.0, r)
    }

    /// ncclCommGetAsyncError's value: None while healthy (success or in progress).
    pub fn async_error(&self) -> Result<Option<String>, NcclFail> {
        // Read as a raw integer: a value cudarc's enum does not know must not become UB.
        let mut raw: u32 = 0;
        // SAFETY: ncclResult_t is a 4-byte C enum.
        let r = unsafe { sys::ncclCommGetAsyncError(self.0, &mut raw as *mut u32 as *mut sys::ncclResult_t) };
        ck("ncclCommGetAsyncError", self.0, r.result())?;
        Ok(match raw {
            0 | 7 => None,
            1 => Some("ncclUnhandledCudaError".into()),
            2 => Some("ncclSystemError".into()),
            3 => Some("ncclInternalError".into()),
            4 => Some("ncclInvalidArgument".into()),
            5 => Some("ncclInvalidUsage".into()),
            6 => Some("ncclRemoteError".into()),
            8 => Some("ncclTimeout".into()),
            n => Some(format!("ncclResult{n}")),
        })
    }

    pub fn finalize(&self) -> Result<(), NcclFail> {
        // SAFETY: a live communicator.
        ck("ncclCommFinalize", self.0, unsafe { result::comm_finalize(self.0) })
    }

    pub fn destroy(&self) -> Result<(), NcclFail> {
        // SAFETY: a live communicator; not used afterwards.
        ck("ncclCommDestroy", std::ptr::null_mut(), unsafe { result::comm_destroy(self.0) })
    }

    pub fn abort(&self) -> Result<(), NcclFail> {
        // SAFETY: a live communicator; not used afterwards.
        ck("ncclCommAbort", std::ptr::null_mut(), unsafe { result::comm_abort(self.0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes() {
        assert_eq!(version_of(22803).to_string(), "2.28.3");
        assert_eq!(version_of(22203), Version(2, 22, 3));
        assert_eq!(version_of(23203), Version(2, 32, 3));
        assert_eq!(version_of(2804), Version(2, 8, 4));
    }
}
