/* An NVTX-heavy program for benchmarks/nvtx_heavy.py: the shape of issue 15, profiled by real nsys.
 *
 * `nvtx_heavy FORWARDS [WARMUP]`: FORWARDS iterations, each an `nsys_cc:iteration` push/pop range (the first
 * WARMUP, default 5, are `nsys_cc:warmup`; payload = batch 8) around one `model_executable()` range (a registered
 * string in the `nsys_cc` domain's default... i.e. the default domain, payload = tokens: 1024 for the first forward
 * of every 16, a prefill, else 8) and, beside it, a small `sample` range (inline text, no payload). Inside the
 * forward a few hundred ns of arithmetic stand for the work. No CUDA.
 *
 * Built against the NVTX3 headers that ship with Nsight Systems (header-only; nsys injects its library at run
 * time through NVTX_INJECTION64_PATH): cc -O2 -I<nsys>/target-linux-x64/nvtx/include nvtx_heavy.c -ldl
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <nvtx3/nvToolsExt.h>

static volatile uint64_t sink;

static void work(unsigned n) {
    uint64_t x = sink;
    for (unsigned i = 0; i < n; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sink = x;
}

static void push(nvtxStringHandle_t name, int64_t payload) {
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = name;
    a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    a.payload.llValue = payload;
    nvtxDomainRangePushEx(NULL, &a);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FORWARDS [WARMUP]\n", argv[0]);
        return 2;
    }
    long forwards = atol(argv[1]);
    long warmup = argc > 2 ? atol(argv[2]) : 5;
    nvtxStringHandle_t forward = nvtxDomainRegisterStringA(NULL, "model_executable()");
    nvtxStringHandle_t iteration = nvtxDomainRegisterStringA(NULL, "nsys_cc:iteration");
    nvtxStringHandle_t warm = nvtxDomainRegisterStringA(NULL, "nsys_cc:warmup");
    for (long i = 0; i < forwards; i++) {
        push(i < warmup ? warm : iteration, 8);
        push(forward, i % 16 == 0 ? 1024 : 8);
        work(i % 16 == 0 ? 400 : 100);
        nvtxRangePop();
        nvtxRangePushA("sample");
        work(20);
        nvtxRangePop();
        nvtxRangePop();
    }
    printf("%ld forwards\n", forwards);
    return 0;
}
