//! The CUDA driver calls epdoctor makes (env's GPU probe, the worker), over cudarc's `sys` level,
//! the one wrapper layer. No RAII: every release is an explicit step of a worker's teardown mode,
//! so that leaking on purpose is possible.

use std::ffi::{c_void, CStr};

use cudarc::driver::sys::{self, CUdeviceptr, CUresult};

/// A failed driver call: which call and which CUresult.
#[derive(Debug, Clone, Copy)]
pub struct CuError {
    pub call: &'static str,
    pub code: CUresult,
}

impl CuError {
    /// The enum name, e.g. CUDA_ERROR_ILLEGAL_ADDRESS (no spaces: used as a marker value).
    pub fn name(&self) -> String {
        code_name(self.code)
    }
}

pub fn code_name(code: CUresult) -> String {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a static string pointer.
    if unsafe { sys::cuGetErrorName(code, &mut p) } == CUresult::CUDA_SUCCESS && !p.is_null() {
        // SAFETY: NUL-terminated static string from the driver.
        return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    }
    format!("{code:?}")
}

impl std::fmt::Display for CuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: as above.
        let desc = if unsafe { sys::cuGetErrorString(self.code, &mut p) } == CUresult::CUDA_SUCCESS && !p.is_null() {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        } else {
            String::new()
        };
        write!(f, "{}: {} ({desc})", self.call, self.name())
    }
}

impl std::error::Error for CuError {}

pub type CuResult<T> = Result<T, CuError>;

fn ck(call: &'static str, r: CUresult) -> CuResult<()> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CuError { call, code: r })
    }
}

/// Whether libcuda can be loaded at all (cudarc panics on the first call otherwise).
pub fn present() -> bool {
    // SAFETY: only tries to dlopen libcuda; no symbol is called.
    unsafe { sys::is_culib_present() }
}

pub fn init() -> CuResult<()> {
    // SAFETY: plain driver call.
    ck("cuInit", unsafe { sys::cuInit(0) })
}

pub fn driver_version() -> CuResult<i32> {
    let mut v = 0;
    ck("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut v) })?;
    Ok(v)
}

pub fn device_count() -> CuResult<i32> {
    let mut n = 0;
    ck("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

pub fn device(ordinal: i32) -> CuResult<sys::CUdevice> {
    let mut d = 0;
    ck("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut d, ordinal) })?;
    Ok(d)
}

pub fn attribute(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> CuResult<i32> {
    let mut v = 0;
    ck("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut v, attr, dev) })?;
    Ok(v)
}

pub fn device_name(dev: sys::CUdevice) -> CuResult<String> {
    let mut buf = [0 as std::ffi::c_char; 256];
    ck("cuDeviceGetName", unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev) })?;
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

pub fn pci_bus_id(dev: sys::CUdevice) -> CuResult<String> {
    let mut buf = [0 as std::ffi::c_char; 64];
    ck("cuDeviceGetPCIBusId", unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) })?;
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

pub fn total_mem(dev: sys::CUdevice) -> CuResult<usize> {
    let mut b = 0;
    ck("cuDeviceTotalMem", unsafe { sys::cuDeviceTotalMem_v2(&mut b, dev) })?;
    Ok(b)
}

/// Can `a` access `b`'s memory (peer access)?
pub fn can_access_peer(a: sys::CUdevice, b: sys::CUdevice) -> CuResult<bool> {
    let mut can = 0;
    ck("cuDeviceCanAccessPeer", unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) })?;
    Ok(can != 0)
}

/// Retain the device's primary context (what the CUDA runtime and PyTorch use) and make it current.
pub fn primary_context(dev: sys::CUdevice) -> CuResult<sys::CUcontext> {
    let mut ctx = std::ptr::null_mut();
    ck("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) })?;
    ck("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })?;
    Ok(ctx)
}

pub fn stream_create() -> CuResult<sys::CUstream> {
    let mut s = std::ptr::null_mut();
    ck("cuStreamCreate", unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) })?;
    Ok(s)
}

pub fn stream_sync(s: sys::CUstream) -> CuResult<()> {
    ck("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(s) })
}

/// Ok(true) when all work is done, Ok(false) while some is pending.
pub fn stream_query(s: sys::CUstream) -> CuResult<bool> {
    match unsafe { sys::cuStreamQuery(s) } {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(CuError { call: "cuStreamQuery", code }),
    }
}

/// Plain cuMemAlloc: pool (stream-ordered) allocations cannot be exported over CUDA IPC.
pub fn alloc(bytes: usize) -> CuResult<CUdeviceptr> {
    let mut p = 0;
    ck("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut p, bytes.max(1)) })?;
    Ok(p)
}

pub fn free(p: CUdeviceptr) -> CuResult<()> {
    ck("cuMemFree", unsafe { sys::cuMemFree_v2(p) })
}

pub fn htod<T: Copy>(dst: CUdeviceptr, src: &[T]) -> CuResult<()> {
    let bytes = std::mem::size_of_val(src);
    ck("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, bytes) })
}

pub fn dtoh<T: Copy>(dst: &mut [T], src: CUdeviceptr) -> CuResult<()> {
    let bytes = std::mem::size_of_val(dst);
    ck("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src, bytes) })
}

pub fn dtod_async(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, s: sys::CUstream) -> CuResult<()> {
    ck("cuMemcpyDtoDAsync", unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, s) })
}

pub fn memset_async(dst: CUdeviceptr, byte: u8, bytes: usize, s: sys::CUstream) -> CuResult<()> {
    ck("cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(dst, byte, bytes, s) })
}

pub fn memset(dst: CUdeviceptr, byte: u8, bytes: usize) -> CuResult<()> {
    ck("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(dst, byte, bytes) })
}

pub const IPC_HANDLE_BYTES: usize = 64;

pub fn ipc_get(p: CUdeviceptr) -> CuResult<[u8; IPC_HANDLE_BYTES]> {
    let mut h = std::mem::MaybeUninit::<sys::CUipcMemHandle>::zeroed();
    ck("cuIpcGetMemHandle", unsafe { sys::cuIpcGetMemHandle(h.as_mut_ptr(), p) })?;
    // SAFETY: written by the driver; a 64-byte plain struct.
    let h = unsafe { h.assume_init() };
    let mut out = [0u8; IPC_HANDLE_BYTES];
    for (o, c) in out.iter_mut().zip(h.reserved.iter()) {
        *o = *c as u8;
    }
    Ok(out)
}

pub fn ipc_open(handle: &[u8]) -> CuResult<CUdeviceptr> {
    // SAFETY: a 64-byte plain struct, every bit pattern valid.
    let mut h: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
    for (c, b) in h.reserved.iter_mut().zip(handle) {
        *c = *b as std::ffi::c_char;
    }
    let mut p = 0;
    let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
    ck("cuIpcOpenMemHandle", unsafe { sys::cuIpcOpenMemHandle_v2(&mut p, h, flags) })?;
    Ok(p)
}

pub fn ipc_close(p: CUdeviceptr) -> CuResult<()> {
    ck("cuIpcCloseMemHandle", unsafe { sys::cuIpcCloseMemHandle(p) })
}

pub struct Module {
    pub module: sys::CUmodule,
}

impl Module {
    pub fn load_ptx(ptx: &str) -> CuResult<Module> {
        let c = std::ffi::CString::new(ptx)
            .map_err(|_| CuError { call: "cuModuleLoadData", code: CUresult::CUDA_ERROR_INVALID_IMAGE })?;
        let mut m = std::ptr::null_mut();
        ck("cuModuleLoadData", unsafe { sys::cuModuleLoadData(&mut m, c.as_ptr() as *const c_void) })?;
        Ok(Module { module: m })
    }

    pub fn function(&self, name: &str) -> CuResult<sys::CUfunction> {
        let c = std::ffi::CString::new(name).expect("kernel names have no NUL");
        let mut f = std::ptr::null_mut();
        ck("cuModuleGetFunction", unsafe { sys::cuModuleGetFunction(&mut f, self.module, c.as_ptr()) })?;
        Ok(f)
    }

    pub fn unload(&self) -> CuResult<()> {
        ck("cuModuleUnload", unsafe { sys::cuModuleUnload(self.module) })
    }
}

/// Kernel parameters, each in its own 8-byte slot (the driver reads the parameter's own size from
/// the start of the slot, which on little-endian holds a 4-byte value's bits). Pointers to the
/// slots are taken only at launch, after the last push.
#[derive(Default)]
pub struct Args {
    slots: Vec<u64>,
}

impl Args {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn ptr(mut self, p: CUdeviceptr) -> Self {
        self.slots.push(p);
        self
    }
    pub fn u64(self, v: u64) -> Self {
        self.ptr(v)
    }
    pub fn i32(mut self, v: i32) -> Self {
        self.slots.push(v as u32 as u64);
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.slots.push(v as u64);
        self
    }
}

pub fn launch(f: sys::CUfunction, grid: u32, block: u32, smem: u32, s: sys::CUstream, mut args: Args) -> CuResult<()> {
    let mut ptrs: Vec<*mut c_void> = args.slots.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
    // SAFETY: the slots live until the call returns; the driver copies the values at launch.
    ck("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, s, ptrs.as_mut_ptr(), std::ptr::null_mut())
    })
}

pub fn event_create() -> CuResult<sys::CUevent> {
    let mut e = std::ptr::null_mut();
    ck("cuEventCreate", unsafe { sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DEFAULT as u32) })?;
    Ok(e)
}

pub fn event_record(e: sys::CUevent, s: sys::CUstream) -> CuResult<()> {
    ck("cuEventRecord", unsafe { sys::cuEventRecord(e, s) })
}

/// Milliseconds between two recorded (and completed) events.
pub fn event_ms(a: sys::CUevent, b: sys::CUevent) -> CuResult<f32> {
    let mut ms = 0f32;
    ck("cuEventElapsedTime", unsafe { sys::cuEventElapsedTime(&mut ms, a, b) })?;
    Ok(ms)
}
