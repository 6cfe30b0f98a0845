"""NVTX push/pop ranges with an int64 payload from pure Python (ctypes), for machines without the `nvtx` package.

NVTX v3 is header-only: a program's NVTX calls go to whatever injection library the tool names in the environment
variable `NVTX_INJECTION64_PATH` (nsys sets it to its `libToolsInjection64.so`). This module does what the NVTX3
headers do (`nvtxDetail/nvtxInit.h`, `nvtxImpl.h`): it loads that library, calls its `InitializeInjectionNvtx2`
with an export-table getter, lets the tool fill the function-pointer tables of the CORE module, and then calls the
tool's `nvtxRangePushEx` / `nvtxRangePop` directly. Names go inline as ASCII messages (`text` in the export),
payloads as `NVTX_PAYLOAD_TYPE_INT64` (`int64Value`). Without a tool (no variable, or a library that refuses) every
call is a no-op, as with NVTX itself.

Why: the GPU machine has Python 3.12 and no `nvtx` package (the packed nvtx 0.2.11 wheel is cp311 only);
`torch.cuda.nvtx` takes no payload. Any Python 3 with ctypes works. Tested under the real nsys 2022.4 on the CPU
(`tests/e2e/test_gpu_traces.py`).

    from nvtx_ctypes import NVTX
    NVTX.push("model_executable()", 128); ...; NVTX.pop()
    with NVTX.range("nsys_cc:iteration", 1): ...
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading

NVTX_VERSION = 3
# NvtxCallbackModule → number of its callback ids (NVTX_CBID_<MODULE>_SIZE), from nvtxDetail/nvtxTypes.h.
MODULE_SIZES = {1: 16, 2: 9, 3: 15, 4: 7, 5: 16, 6: 7}  # CORE, CUDA, OPENCL, CUDART, CORE2, SYNC
CORE = 1
CBID_RANGE_PUSH_EX = 8
CBID_RANGE_POP = 11
ETID_CALLBACKS = 1
ETID_VERSIONINFO = 3
PAYLOAD_INT64 = 2
MESSAGE_ASCII = 1
EVENT_ATTRIB_SIZE = 48  # sizeof(nvtxEventAttributes_v2) on 64-bit


class _Payload(ctypes.Union):
    _fields_ = [("ullValue", ctypes.c_uint64), ("llValue", ctypes.c_int64), ("dValue", ctypes.c_double)]


class EventAttributes(ctypes.Structure):
    """nvtxEventAttributes_v2 (nvToolsExt.h)."""

    _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16), ("category", ctypes.c_uint32),
                ("colorType", ctypes.c_int32), ("color", ctypes.c_uint32), ("payloadType", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("payload", _Payload), ("messageType", ctypes.c_int32),
                ("message", ctypes.c_char_p)]


assert ctypes.sizeof(EventAttributes) == EVENT_ATTRIB_SIZE

_FnPtr = ctypes.c_void_p
_Table = ctypes.POINTER(ctypes.POINTER(_FnPtr))  # NvtxFunctionTable: an array of pointers to function pointers
_GetModuleFunctionTable = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Table),
                                           ctypes.POINTER(ctypes.c_uint))
_SetInjectionNvtxVersion = ctypes.CFUNCTYPE(None, ctypes.c_uint32)
_GetExportTable = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
_InitializeInjection = ctypes.CFUNCTYPE(ctypes.c_int, _GetExportTable)
_PushEx = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(EventAttributes))
_Pop = ctypes.CFUNCTYPE(ctypes.c_int)


class _Callbacks(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("GetModuleFunctionTable", _GetModuleFunctionTable)]


class _VersionInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32), ("reserved0", ctypes.c_uint32),
                ("SetInjectionNvtxVersion", _SetInjectionNvtxVersion)]


class Nvtx:
    """One NVTX instance attached to the tool named in the environment (lazily, on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = False
        self._push: _PushEx | None = None
        self._pop: _Pop | None = None
        self.status = "not initialised"

    def _init(self) -> None:
        with self._lock:
            if self._ready:
                return
            try:
                self.status = self._attach()
            finally:
                self._ready = True

    def _attach(self) -> str:
        path = os.environ.get("NVTX_INJECTION64_PATH")
        if not path:
            return "no tool attached (NVTX_INJECTION64_PATH unset): NVTX calls are no-ops"
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_LAZY", 1) | ctypes.RTLD_GLOBAL)
            init = _InitializeInjection(("InitializeInjectionNvtx2", lib))
        except (OSError, AttributeError) as exc:
            return f"cannot load the injection library {path}: {exc}"
        # Slots the tool fills (one function pointer per callback id; slot 0 and the last stay empty) and, per
        # module, the array of pointers to them that GetModuleFunctionTable hands out.
        self._slots = {m: (_FnPtr * (n + 1))() for m, n in MODULE_SIZES.items()}
        self._tables = {}
        for m, n in MODULE_SIZES.items():
            table = (ctypes.POINTER(_FnPtr) * (n + 1))()
            for i in range(1, n):
                table[i] = ctypes.pointer(_FnPtr.from_buffer(self._slots[m], i * ctypes.sizeof(_FnPtr)))
            self._tables[m] = table

        def get_module_table(module, out_table, out_size):
            table = self._tables.get(module)
            if table is None:
                return 0
            if out_table:
                out_table[0] = ctypes.cast(table, _Table)
            if out_size:
                out_size[0] = MODULE_SIZES[module]
            return 1

        self._get_module_table = _GetModuleFunctionTable(get_module_table)
        self._set_version = _SetInjectionNvtxVersion(lambda version: None)
        self._callbacks = _Callbacks(ctypes.sizeof(_Callbacks), self._get_module_table)
        self._version = _VersionInfo(ctypes.sizeof(_VersionInfo), NVTX_VERSION, 0, self._set_version)

        def get_export_table(table_id):
            if table_id == ETID_CALLBACKS:
                return ctypes.addressof(self._callbacks)
            if table_id == ETID_VERSIONINFO:
                return ctypes.addressof(self._version)
            return None

        self._get_export_table = _GetExportTable(get_export_table)
        self._lib = lib
        if not init(self._get_export_table):
            return f"the injection library {path} refused to initialise: NVTX calls are no-ops"
        push, pop = self._slots[CORE][CBID_RANGE_PUSH_EX], self._slots[CORE][CBID_RANGE_POP]
        if not push or not pop:
            return f"the injection library {path} attached no range push/pop: NVTX calls are no-ops"
        self._push, self._pop = _PushEx(push), _Pop(pop)
        return f"attached to {path}"

    @property
    def attached(self) -> bool:
        if not self._ready:
            self._init()
        return self._push is not None

    def push(self, name: str, payload: int | None = None) -> None:
        """Open a push/pop range on this thread: `name` inline, `payload` as an int64 (none when None)."""
        if not self._ready:
            self._init()
        if self._push is None:
            return
        attrib = EventAttributes(version=NVTX_VERSION, size=EVENT_ATTRIB_SIZE, messageType=MESSAGE_ASCII,
                                 message=name.encode())
        if payload is not None:
            attrib.payloadType = PAYLOAD_INT64
            attrib.payload.llValue = int(payload)
        self._push(ctypes.byref(attrib))

    def pop(self) -> None:
        if self._pop is not None:
            self._pop()

    @contextlib.contextmanager
    def range(self, name: str, payload: int | None = None):
        self.push(name, payload)
        try:
            yield
        finally:
            self.pop()


NVTX = Nvtx()
