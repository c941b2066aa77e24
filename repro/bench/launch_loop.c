/* launch_loop.c — the native launch floor: cuLaunchKernel of a CUBIN from a plain C loop.
 *
 *   launch_loop CUBIN SYMBOL ISV_IN ISV_OUT ROUNDS ASYNC_LAUNCHES SYNC_LAUNCHES VERIFY_STEPS
 *
 * Loads the CUBIN (the very image the cupy backend built), copies the float32
 * ISV from ISV_IN to the device, runs VERIFY_STEPS launches and writes the
 * resulting ISV to ISV_OUT (the caller checks it against the spec model), then
 * times ROUNDS rounds of ASYNC_LAUNCHES launches with one synchronise, and
 * ROUNDS rounds of SYNC_LAUNCHES launch + synchronise pairs. Prints one JSON
 * object of µs per launch. The driver is loaded with dlopen and the few
 * functions used are declared here from the documented driver API, so neither
 * cuda.h nor -lcuda is needed at build time. Exit 2 with one line on error.
 */
#define _POSIX_C_SOURCE 199309L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult; /* 0 = CUDA_SUCCESS */
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef unsigned long long CUdeviceptr;

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*p_cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **);
static CUresult (*p_cuGetErrorString)(CUresult, const char **);

static void die(const char *what, const char *detail) {
    fprintf(stderr, "launch_loop: %s: %s\n", what, detail);
    exit(2);
}

static void check(CUresult r, const char *call) {
    if (r != 0) {
        const char *msg = "unknown error";
        if (p_cuGetErrorString) p_cuGetErrorString(r, &msg);
        die(call, msg);
    }
}

static void *sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f) die("libcuda lacks", name);
    return f;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open", path);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(*size);
    if (!buf || fread(buf, 1, *size, f) != *size) die("cannot read", path);
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 9) die("usage", "CUBIN SYMBOL ISV_IN ISV_OUT ROUNDS ASYNC_LAUNCHES SYNC_LAUNCHES VERIFY_STEPS");
    int rounds = atoi(argv[5]), n_async = atoi(argv[6]), n_sync = atoi(argv[7]), n_verify = atoi(argv[8]);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) die("cannot load the CUDA driver (libcuda.so.1)", dlerror());
    p_cuGetErrorString = (CUresult(*)(CUresult, const char **))sym(lib, "cuGetErrorString");
    *(void **)&p_cuInit = sym(lib, "cuInit");
    *(void **)&p_cuDeviceGet = sym(lib, "cuDeviceGet");
    *(void **)&p_cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&p_cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    *(void **)&p_cuModuleLoadData = sym(lib, "cuModuleLoadData");
    *(void **)&p_cuModuleGetFunction = sym(lib, "cuModuleGetFunction");
    *(void **)&p_cuMemAlloc = sym(lib, "cuMemAlloc_v2");
    *(void **)&p_cuMemcpyHtoD = sym(lib, "cuMemcpyHtoD_v2");
    *(void **)&p_cuMemcpyDtoH = sym(lib, "cuMemcpyDtoH_v2");
    *(void **)&p_cuStreamCreate = sym(lib, "cuStreamCreate");
    *(void **)&p_cuStreamSynchronize = sym(lib, "cuStreamSynchronize");
    *(void **)&p_cuLaunchKernel = sym(lib, "cuLaunchKernel");

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUstream stream;
    check(p_cuInit(0), "cuInit");
    check(p_cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(p_cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(p_cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    size_t image_size, isv_bytes;
    void *image = read_file(argv[1], &image_size);
    check(p_cuModuleLoadData(&mod, image), "cuModuleLoadData");
    check(p_cuModuleGetFunction(&fn, mod, argv[2]), "cuModuleGetFunction");
    check(p_cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
    float *isv0 = read_file(argv[3], &isv_bytes);

    CUdeviceptr isv;
    void *params[] = {&isv};
    check(p_cuMemAlloc(&isv, isv_bytes), "cuMemAlloc");
    check(p_cuMemcpyHtoD(isv, isv0, isv_bytes), "cuMemcpyHtoD");
    for (int i = 0; i < n_verify; ++i) check(p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, 0), "cuLaunchKernel");
    check(p_cuStreamSynchronize(stream), "cuStreamSynchronize");
    float *after = malloc(isv_bytes);
    check(p_cuMemcpyDtoH(after, isv, isv_bytes), "cuMemcpyDtoH");
    FILE *out = fopen(argv[4], "wb");
    if (!out || fwrite(after, 1, isv_bytes, out) != isv_bytes) die("cannot write", argv[4]);
    fclose(out);

    for (int i = 0; i < 2 * n_async; ++i) p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, 0); /* warm-up */
    check(p_cuStreamSynchronize(stream), "cuStreamSynchronize");
    printf("{\"async_us\": [");
    for (int r = 0; r < rounds; ++r) {
        double t0 = now_us();
        for (int i = 0; i < n_async; ++i) p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, 0);
        check(p_cuStreamSynchronize(stream), "cuStreamSynchronize");
        printf("%s%.6f", r ? ", " : "", (now_us() - t0) / n_async);
    }
    printf("], \"sync_us\": [");
    for (int r = 0; r < rounds; ++r) {
        double t0 = now_us();
        for (int i = 0; i < n_sync; ++i) {
            p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, 0);
            p_cuStreamSynchronize(stream);
        }
        printf("%s%.6f", r ? ", " : "", (now_us() - t0) / n_sync);
    }
    check(p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, 0), "cuLaunchKernel");
    check(p_cuStreamSynchronize(stream), "cuStreamSynchronize");
    printf("]}\n");
    return 0;
}
