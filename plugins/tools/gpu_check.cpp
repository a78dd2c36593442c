// Checks the CUDA kernels against the CPU reference on this machine's GPU, and times them.
//
// usage: deploykit_gpu_check [RESULTS.json] [--small]
//
// Compiled with DEPLOYKIT_WITH_GLUE (and the TensorRT headers), every case also runs through the
// TensorRT plugin glue's own runtime path, as an engine would: createPlugin (runtime phase, from the
// serialized fields) -> attachToContext -> onShapeChange -> enqueue on a non-blocking stream, into an
// output filled with NaN first (the plugin must write all of it), against the same CPU reference, timed
// on that stream. No libnvinfer is needed: TensorRT's interfaces are virtual. --small runs only the
// untimed cases (for compute-sanitizer).
//
// Every case runs the CPU reference and the CUDA launcher (float32 and float16) on the same random
// inputs and compares the outputs (max abs error against a tolerance) and the launcher's skip count
// against the number of out-of-range points injected. The realistic cases are also timed (memset +
// kernel, CUDA events). "Bytes" is the compulsory traffic: every input read once and the output
// written once; the floor is that traffic at the device's peak bandwidth, so "% of peak" says how
// close a kernel is to memory-bound. Exit code: 0 all passed, 1 a check failed, 2 no usable GPU.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bev_pool/bev_pool.h"
#include "pillar_scatter/pillar_scatter.h"
#ifdef DEPLOYKIT_WITH_GLUE
#include <memory>

#include "common/trt_plugin.h"
#endif

namespace
{

void check(cudaError_t status, char const* what)
{
    if (status != cudaSuccess)
    {
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
    }
}

class DeviceBuffer
{
public:
    explicit DeviceBuffer(size_t bytes)
        : mBytes(bytes)
    {
        check(cudaMalloc(&mData, std::max<size_t>(bytes, 1)), "cudaMalloc");
    }
    DeviceBuffer(void const* host, size_t bytes)
        : DeviceBuffer(bytes)
    {
        check(cudaMemcpy(mData, host, bytes, cudaMemcpyHostToDevice), "upload");
    }
    template <typename T>
    explicit DeviceBuffer(std::vector<T> const& host)
        : DeviceBuffer(host.data(), host.size() * sizeof(T))
    {
    }
    DeviceBuffer(DeviceBuffer const&) = delete;
    DeviceBuffer& operator=(DeviceBuffer const&) = delete;
    ~DeviceBuffer()
    {
        cudaFree(mData);
    }
    template <typename T>
    T* get() const
    {
        return static_cast<T*>(mData);
    }
    void download(void* host) const
    {
        check(cudaMemcpy(host, mData, mBytes, cudaMemcpyDeviceToHost), "download");
    }

private:
    void* mData{nullptr};
    size_t mBytes;
};

// Device copy of a float tensor in the run's dtype.
DeviceBuffer upload(std::vector<float> const& values, deploykit_dtype dtype)
{
    if (dtype == DEPLOYKIT_FLOAT32)
    {
        return DeviceBuffer(values);
    }
    std::vector<__half> half(values.size());
    std::transform(values.begin(), values.end(), half.begin(), [](float v) { return __float2half(v); });
    return DeviceBuffer(half);
}

std::vector<float> downloadFloats(DeviceBuffer const& buffer, size_t count, deploykit_dtype dtype)
{
    std::vector<float> values(count);
    if (dtype == DEPLOYKIT_FLOAT32)
    {
        buffer.download(values.data());
        return values;
    }
    std::vector<__half> half(count);
    buffer.download(half.data());
    std::transform(half.begin(), half.end(), values.begin(), [](__half v) { return __half2float(v); });
    return values;
}

// The float16 run's reference sees the inputs rounded as the GPU sees them.
std::vector<float> asSeenBy(std::vector<float> values, deploykit_dtype dtype)
{
    if (dtype == DEPLOYKIT_FLOAT16)
    {
        for (float& v : values)
        {
            v = __half2float(__float2half(v));
        }
    }
    return values;
}

struct Result
{
    std::string op, name, dtype;
    double maxAbsError{0}, tolerance{0};
    int32_t skipped{0}, expectedSkips{0};
    bool timed{false};
    double ms{0}, bytes{0};
    bool ok() const
    {
        return maxAbsError <= tolerance && skipped == expectedSkips;
    }
};

char const* dtypeName(deploykit_dtype dtype)
{
    return dtype == DEPLOYKIT_FLOAT16 ? "float16" : "float32";
}

void compare(std::vector<float> const& got, std::vector<float> const& want, deploykit_dtype dtype, Result& r)
{
    double largest = 1.0;
    for (size_t i = 0; i < want.size(); ++i)
    {
        largest = std::max(largest, std::fabs(double(want[i])));
        double const error = std::fabs(double(got[i]) - double(want[i]));
        r.maxAbsError = std::isnan(error) ? INFINITY : std::max(r.maxAbsError, error);
    }
    // float16: output rounding (2^-11 relative) plus rounding of atomically added partial sums.
    r.tolerance = (dtype == DEPLOYKIT_FLOAT16 ? 4e-3 : 1e-4) * largest;
}

// Mean milliseconds of `launch` over repeated runs on the default stream, after a warm-up.
template <typename Launch>
double timeMs(Launch launch, cudaStream_t stream = nullptr)
{
    constexpr int kWarmup = 3;
    constexpr int kRuns = 20;
    for (int i = 0; i < kWarmup; ++i)
    {
        check(launch(), "warm-up launch");
    }
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < kRuns; ++i)
    {
        check(launch(), "timed launch");
    }
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / kRuns;
}

#ifdef DEPLOYKIT_WITH_GLUE
// -- the plugin glue's runtime path -----------------------------------------------------------------

class StderrLogger final : public nvinfer1::ILogger
{
public:
    void log(Severity severity, nvinfer1::AsciiChar const* msg) noexcept override
    {
        if (severity <= Severity::kERROR)
        {
            std::fprintf(stderr, "plugin: %s\n", msg);
        }
    }
};

class Finder final : public nvinfer1::ILoggerFinder
{
public:
    nvinfer1::ILogger* findLogger() override
    {
        return &mLogger;
    }

private:
    StderrLogger mLogger;
};

nvinfer1::IPluginV3OneRuntime* runtimeOf(nvinfer1::IPluginV3& plugin)
{
    return static_cast<nvinfer1::IPluginV3OneRuntime*>(
        plugin.getCapabilityInterface(nvinfer1::PluginCapabilityType::kRUNTIME));
}

// A plugin as an engine holds it: created from its serialized field (runtime phase), then attached to
// an execution context (TensorRT passes its resource context; the glue keeps none).
std::unique_ptr<nvinfer1::IPluginV3> runtimePlugin(char const* name, char const* field, std::vector<int32_t> values)
{
    int32_t count = 0;
    nvinfer1::IPluginCreatorInterface* const* creators = getCreators(count);
    for (int32_t i = 0; i < count; ++i)
    {
        auto* creator = static_cast<nvinfer1::IPluginCreatorV3One*>(creators[i]);
        if (std::string(creator->getPluginName()) != name)
        {
            continue;
        }
        nvinfer1::PluginField const f(field, values.data(), nvinfer1::PluginFieldType::kINT32, int32_t(values.size()));
        nvinfer1::PluginFieldCollection const fc{1, &f};
        std::unique_ptr<nvinfer1::IPluginV3> created(
            creator->createPlugin("gpu_check", &fc, nvinfer1::TensorRTPhase::kRUNTIME));
        if (!created)
        {
            throw std::runtime_error(std::string(name) + ": createPlugin (runtime phase) failed");
        }
        std::unique_ptr<nvinfer1::IPluginV3> attached(runtimeOf(*created)->attachToContext(nullptr));
        if (!attached)
        {
            throw std::runtime_error(std::string(name) + ": attachToContext returned null");
        }
        return attached;
    }
    throw std::runtime_error(std::string("getCreators lists no ") + name);
}

nvinfer1::PluginTensorDesc tensorDesc(std::vector<int64_t> const& shape, nvinfer1::DataType type)
{
    nvinfer1::PluginTensorDesc d{};
    d.dims.nbDims = int32_t(shape.size());
    for (size_t i = 0; i < shape.size(); ++i)
    {
        d.dims.d[i] = shape[i];
    }
    d.type = type;
    d.format = nvinfer1::TensorFormat::kLINEAR;
    d.scale = 1.0F;
    return d;
}

// onShapeChange, then enqueue on `stream` into `out` (prefilled with NaN); the launch for timing.
struct GlueRun
{
    std::unique_ptr<nvinfer1::IPluginV3> plugin;
    std::vector<nvinfer1::PluginTensorDesc> in, out;
    std::vector<void const*> inputs;
    std::vector<void*> outputs;
    cudaStream_t stream{nullptr};

    cudaError_t enqueue()
    {
        int32_t const status = runtimeOf(*plugin)->enqueue(in.data(), out.data(), inputs.data(), outputs.data(),
            nullptr, stream);
        return status == 0 ? cudaGetLastError() : cudaErrorLaunchFailure;
    }
};

void prepare(GlueRun& run, size_t outBytes)
{
    if (runtimeOf(*run.plugin)->onShapeChange(run.in.data(), int32_t(run.in.size()), run.out.data(), 1) != 0)
    {
        throw std::runtime_error("onShapeChange rejected the shapes");
    }
    check(cudaStreamCreateWithFlags(&run.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaMemsetAsync(run.outputs[0], 0xFF, outBytes, run.stream), "NaN fill"); // all-ones bits: NaN
}

Result glueResult(Result kernel, GlueRun& run, DeviceBuffer const& out, size_t outCount, deploykit_dtype dtype,
    std::vector<float> const& want, bool timed, double bytes);
#endif

#ifdef DEPLOYKIT_WITH_GLUE
constexpr bool kGlue = true;
#else
constexpr bool kGlue = false;
#endif

struct BevInputs
{
    deploykit_bev_pool_dims dims{};
    std::vector<float> depth, feat;
    std::vector<int32_t> ranksDepth, ranksFeat, ranksBev, starts, lengths;
};

struct BevCase
{
    std::string name;
    BevInputs device;
    std::vector<int32_t> referenceRanksDepth; // device.ranksDepth with skipped points sent to a zero depth
    int32_t expectedSkips;
    bool timed;
};

// Frustum points kept with probability `keep`, each sent to a random BEV cell of its batch; runs of
// points sharing a cell become intervals. `messy` splits runs in two (intervals sharing a cell),
// adds zero-length intervals and points `badPoints` ranks_depth past the end.
BevCase makeBevCase(std::string name, deploykit_bev_pool_dims d, double keep, bool messy, int32_t badPoints,
    bool timed, std::mt19937& rng)
{
    BevCase c{std::move(name), {}, {}, badPoints, timed};
    BevInputs& in = c.device;
    int64_t const featRows = d.batch * d.cameras * d.height * d.width;
    int64_t const depthSize = featRows * d.depth_bins;
    int64_t const cellsPerBatch = d.bev_z * d.bev_y * d.bev_x;
    std::uniform_real_distribution<float> unit(0.0F, 1.0F);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int64_t> cell(0, cellsPerBatch - 1);
    in.depth.resize(depthSize);
    for (float& v : in.depth)
    {
        v = unit(rng);
    }
    in.depth[0] = 0.0F; // the reference's stand-in for a skipped point
    in.feat.resize(featRows * d.channels);
    for (float& v : in.feat)
    {
        v = normal(rng);
    }
    struct Point
    {
        int32_t depth, feat, bev;
    };
    std::vector<Point> points;
    for (int64_t rank = 0; rank < depthSize; ++rank)
    {
        if (unit(rng) >= keep)
        {
            continue;
        }
        int64_t const w = rank % d.width;
        int64_t const h = rank / d.width % d.height;
        int64_t const bn = rank / (d.width * d.height * d.depth_bins); // b * N + n
        points.push_back({int32_t(rank), int32_t((bn * d.height + h) * d.width + w),
            int32_t(bn / d.cameras * cellsPerBatch + cell(rng))});
    }
    std::stable_sort(points.begin(), points.end(), [](Point a, Point b) { return a.bev < b.bev; });
    for (Point const& p : points)
    {
        in.ranksDepth.push_back(p.depth);
        in.ranksFeat.push_back(p.feat);
        in.ranksBev.push_back(p.bev);
    }
    int32_t const total = int32_t(points.size());
    for (int32_t i = 0; i < total;)
    {
        int32_t end = i;
        while (end < total && points[end].bev == points[i].bev)
        {
            ++end;
        }
        int32_t const split = messy && end - i >= 2 ? i + (end - i) / 2 : end;
        in.starts.push_back(i);
        in.lengths.push_back(split - i);
        if (split < end)
        {
            in.starts.push_back(split);
            in.lengths.push_back(end - split);
        }
        if (messy && in.starts.size() % 7 == 0)
        {
            in.starts.push_back(i);
            in.lengths.push_back(0);
        }
        i = end;
    }
    c.referenceRanksDepth = in.ranksDepth;
    for (int32_t k = 0; k < badPoints; ++k)
    {
        int32_t const i = k * (total / std::max(badPoints, 1)); // distinct points
        in.ranksDepth[i] = int32_t(depthSize + k);
        c.referenceRanksDepth[i] = 0;
    }
    d.num_points = total;
    d.num_intervals = int64_t(in.starts.size());
    in.dims = d;
    return c;
}

std::vector<Result> runBev(BevCase const& c, deploykit_dtype dtype)
{
    BevInputs const& in = c.device;
    deploykit_bev_pool_dims const& d = in.dims;
    size_t const outCount = d.batch * d.bev_z * d.bev_y * d.bev_x * d.channels;
    std::vector<float> const depth = asSeenBy(in.depth, dtype);
    std::vector<float> const feat = asSeenBy(in.feat, dtype);
    std::vector<float> want(outCount);
    char err[512] = "";
    if (deploykit_bev_pool_v2_cpu(depth.data(), feat.data(), c.referenceRanksDepth.data(), in.ranksFeat.data(),
            in.ranksBev.data(), in.starts.data(), in.lengths.data(), &d, want.data(), err, sizeof(err)))
    {
        throw std::runtime_error(std::string("CPU reference failed: ") + err);
    }
    DeviceBuffer const depthD = upload(in.depth, dtype);
    DeviceBuffer const featD = upload(in.feat, dtype);
    DeviceBuffer const ranksDepth(in.ranksDepth), ranksFeat(in.ranksFeat), ranksBev(in.ranksBev);
    DeviceBuffer const starts(in.starts), lengths(in.lengths);
    DeviceBuffer const out(outCount * (dtype == DEPLOYKIT_FLOAT16 ? 2 : 4));
    int32_t const zero = 0;
    DeviceBuffer const skipped(&zero, sizeof(zero));
    auto launch = [&](int32_t* counter) {
        return deploykit_bev_pool_v2_cuda(dtype, depthD.get<void>(), featD.get<void>(), ranksDepth.get<int32_t>(),
            ranksFeat.get<int32_t>(), ranksBev.get<int32_t>(), starts.get<int32_t>(), lengths.get<int32_t>(), &d,
            out.get<void>(), counter, nullptr);
    };
    check(launch(skipped.get<int32_t>()), "BEVPoolV2 launch");
    check(cudaDeviceSynchronize(), "BEVPoolV2 kernel");
    Result r{"BEVPoolV2", c.name, dtypeName(dtype)};
    compare(downloadFloats(out, outCount, dtype), want, dtype, r);
    skipped.download(&r.skipped);
    r.expectedSkips = c.expectedSkips;
    if (c.timed)
    {
        r.timed = true;
        r.ms = timeMs([&] { return launch(nullptr); });
        double const elementSize = dtype == DEPLOYKIT_FLOAT16 ? 2 : 4;
        r.bytes = elementSize * (in.depth.size() + in.feat.size() + outCount)
            + 4.0 * (3 * d.num_points + 2 * d.num_intervals);
    }
    std::vector<Result> results{r};
#ifdef DEPLOYKIT_WITH_GLUE
    auto const f = dtype == DEPLOYKIT_FLOAT16 ? nvinfer1::DataType::kHALF : nvinfer1::DataType::kFLOAT;
    auto const i32 = nvinfer1::DataType::kINT32;
    DeviceBuffer const glueOut(outCount * (dtype == DEPLOYKIT_FLOAT16 ? 2 : 4));
    GlueRun run{runtimePlugin("BEVPoolV2", "bev_shape", {int32_t(d.bev_z), int32_t(d.bev_y), int32_t(d.bev_x)}),
        {tensorDesc({d.batch, d.cameras, d.depth_bins, d.height, d.width}, f),
            tensorDesc({d.batch, d.cameras, d.height, d.width, d.channels}, f), tensorDesc({d.num_points}, i32),
            tensorDesc({d.num_points}, i32), tensorDesc({d.num_points}, i32), tensorDesc({d.num_intervals}, i32),
            tensorDesc({d.num_intervals}, i32)},
        {tensorDesc({d.batch, d.bev_z, d.bev_y, d.bev_x, d.channels}, f)},
        {depthD.get<void>(), featD.get<void>(), ranksDepth.get<void>(), ranksFeat.get<void>(), ranksBev.get<void>(),
            starts.get<void>(), lengths.get<void>()},
        {glueOut.get<void>()}};
    results.push_back(glueResult(r, run, glueOut, outCount, dtype, want, c.timed, r.bytes));
#endif
    return results;
}

struct PillarInputs
{
    deploykit_pillar_scatter_dims dims{};
    std::vector<float> features;
    std::vector<int32_t> coords, numPillars;
};

struct PillarCase
{
    std::string name;
    PillarInputs device;
    PillarInputs reference; // skipped pillars moved to (0, 0) with zero features
    int32_t expectedSkips;
    bool timed;
};

// Live pillars on distinct cells (the four grid corners first), padding rows with coordinates off
// the grid (must be ignored), and a garbage batch column (must not be read). `duplicates` puts every
// fifth pillar on its predecessor's cell; `badPillars` live pillars get a y past the grid.
PillarCase makePillarCase(std::string name, deploykit_pillar_scatter_dims d, std::vector<int32_t> live,
    bool duplicates, int32_t badPillars, bool timed, std::mt19937& rng)
{
    PillarCase c{std::move(name), {}, {}, badPillars, timed};
    PillarInputs& in = c.device;
    in.dims = d;
    in.numPillars = std::move(live);
    std::normal_distribution<float> normal;
    in.features.resize(d.batch * d.max_pillars * d.channels);
    for (float& v : in.features)
    {
        v = normal(rng);
    }
    in.coords.assign(d.batch * d.max_pillars * 4, -1);
    int64_t const cells = d.grid_y * d.grid_x;
    for (int64_t b = 0; b < d.batch; ++b)
    {
        std::vector<int64_t> order(cells);
        std::iota(order.begin(), order.end(), 0);
        int64_t const corners[] = {0, d.grid_x - 1, cells - d.grid_x, cells - 1};
        for (int i = 0; i < 4; ++i)
        {
            std::swap(order[i], order[std::find(order.begin(), order.end(), corners[i]) - order.begin()]);
        }
        std::shuffle(order.begin() + 4, order.end(), rng);
        for (int64_t p = 0; p < in.numPillars[b]; ++p)
        {
            int64_t const cell = duplicates && p % 5 == 4 ? order[p - 1] : order[p];
            int32_t* row = &in.coords[(b * d.max_pillars + p) * 4];
            row[0] = 7; // batch column: not read
            row[1] = 0;
            row[2] = int32_t(cell / d.grid_x);
            row[3] = int32_t(cell % d.grid_x);
        }
    }
    c.reference = in;
    for (int32_t k = 0; k < badPillars; ++k)
    {
        int64_t const row = k * 3 + 1; // live pillars of batch 0
        in.coords[row * 4 + 2] = int32_t(d.grid_y + k);
        c.reference.coords[row * 4 + 2] = 0;
        c.reference.coords[row * 4 + 3] = 0;
        std::fill_n(c.reference.features.begin() + row * d.channels, d.channels, 0.0F);
    }
    return c;
}

std::vector<Result> runPillars(PillarCase const& c, deploykit_dtype dtype)
{
    PillarInputs const& in = c.device;
    deploykit_pillar_scatter_dims const& d = in.dims;
    size_t const outCount = d.batch * d.channels * d.grid_y * d.grid_x;
    std::vector<float> const features = asSeenBy(c.reference.features, dtype);
    std::vector<float> want(outCount);
    char err[512] = "";
    if (deploykit_pillar_scatter_cpu(features.data(), c.reference.coords.data(), c.reference.numPillars.data(), &d,
            want.data(), err, sizeof(err)))
    {
        throw std::runtime_error(std::string("CPU reference failed: ") + err);
    }
    DeviceBuffer const featuresD = upload(in.features, dtype);
    DeviceBuffer const coords(in.coords), numPillars(in.numPillars);
    DeviceBuffer const out(outCount * (dtype == DEPLOYKIT_FLOAT16 ? 2 : 4));
    int32_t const zero = 0;
    DeviceBuffer const skipped(&zero, sizeof(zero));
    auto launch = [&](int32_t* counter) {
        return deploykit_pillar_scatter_cuda(dtype, featuresD.get<void>(), coords.get<int32_t>(),
            numPillars.get<int32_t>(), &d, out.get<void>(), counter, nullptr);
    };
    check(launch(skipped.get<int32_t>()), "PillarScatter launch");
    check(cudaDeviceSynchronize(), "PillarScatter kernel");
    Result r{"PillarScatter", c.name, dtypeName(dtype)};
    compare(downloadFloats(out, outCount, dtype), want, dtype, r);
    skipped.download(&r.skipped);
    r.expectedSkips = c.expectedSkips;
    if (c.timed)
    {
        r.timed = true;
        r.ms = timeMs([&] { return launch(nullptr); });
        double const elementSize = dtype == DEPLOYKIT_FLOAT16 ? 2 : 4;
        r.bytes = elementSize * (in.features.size() + outCount) + 4.0 * (in.coords.size() + in.numPillars.size());
    }
    std::vector<Result> results{r};
#ifdef DEPLOYKIT_WITH_GLUE
    auto const f = dtype == DEPLOYKIT_FLOAT16 ? nvinfer1::DataType::kHALF : nvinfer1::DataType::kFLOAT;
    auto const i32 = nvinfer1::DataType::kINT32;
    DeviceBuffer const glueOut(outCount * (dtype == DEPLOYKIT_FLOAT16 ? 2 : 4));
    int64_t const coordWidth = int64_t(in.coords.size() / std::max<int64_t>(d.batch * d.max_pillars, 1));
    GlueRun run{runtimePlugin("PillarScatter", "grid", {int32_t(d.grid_y), int32_t(d.grid_x)}),
        {tensorDesc({d.batch, d.max_pillars, d.channels}, f), tensorDesc({d.batch, d.max_pillars, coordWidth}, i32),
            tensorDesc({d.batch}, i32)},
        {tensorDesc({d.batch, d.channels, d.grid_y, d.grid_x}, f)},
        {featuresD.get<void>(), coords.get<void>(), numPillars.get<void>()}, {glueOut.get<void>()}};
    results.push_back(glueResult(r, run, glueOut, outCount, dtype, want, c.timed, r.bytes));
#endif
    return results;
}

#ifdef DEPLOYKIT_WITH_GLUE
Result glueResult(Result kernel, GlueRun& run, DeviceBuffer const& out, size_t outCount, deploykit_dtype dtype,
    std::vector<float> const& want, bool timed, double bytes)
{
    size_t const outBytes = outCount * (dtype == DEPLOYKIT_FLOAT16 ? 2 : 4);
    prepare(run, outBytes);
    check(run.enqueue(), "enqueue");
    check(cudaStreamSynchronize(run.stream), "enqueue on the stream");
    Result r{kernel.op + " (enqueue)", kernel.name, kernel.dtype};
    compare(downloadFloats(out, outCount, dtype), want, dtype, r);
    r.skipped = r.expectedSkips = 0; // the glue passes no skip counter (reading it back would need a sync)
    if (timed)
    {
        r.timed = true;
        r.ms = timeMs([&] { return run.enqueue(); }, run.stream);
        r.bytes = bytes;
    }
    check(cudaStreamDestroy(run.stream), "cudaStreamDestroy");
    return r;
}
#endif

struct Device
{
    std::string name;
    int major{0}, minor{0};
    double peakGBps{0}; // from memory clock and bus width
    double copyGBps{0}; // measured device-to-device copy (read + write)
};

Device describeDevice()
{
    Device dev;
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    dev.name = prop.name;
    dev.major = prop.major;
    dev.minor = prop.minor;
    int clockKHz = 0;
    int busBits = 0;
    check(cudaDeviceGetAttribute(&clockKHz, cudaDevAttrMemoryClockRate, 0), "memory clock");
    check(cudaDeviceGetAttribute(&busBits, cudaDevAttrGlobalMemoryBusWidth, 0), "bus width");
    dev.peakGBps = 2.0 * clockKHz * 1e3 * (busBits / 8.0) / 1e9; // double data rate
    size_t const bytes = size_t(256) << 20;
    DeviceBuffer const a(bytes), b(bytes);
    double const ms = timeMs([&] { return cudaMemcpyAsync(b.get<void>(), a.get<void>(), bytes, cudaMemcpyDeviceToDevice); });
    dev.copyGBps = 2.0 * bytes / (ms * 1e-3) / 1e9;
    return dev;
}

void printTable(Device const& dev, std::vector<Result> const& results)
{
    std::printf("%s (sm_%d%d): peak %.0f GB/s (clock x bus), device copy %.0f GB/s\n\n", dev.name.c_str(), dev.major,
        dev.minor, dev.peakGBps, dev.copyGBps);
    std::printf("%-14s %-26s %-8s %11s %10s %9s %9s %10s %9s %9s %7s  %s\n", "op", "case", "dtype", "max_abs_err",
        "tolerance", "skipped", "time_ms", "bytes_MB", "GB/s", "floor_ms", "%peak", "status");
    for (Result const& r : results)
    {
        std::printf("%-14s %-26s %-8s %11.3g %10.3g %4d/%-4d", r.op.c_str(), r.name.c_str(), r.dtype.c_str(),
            r.maxAbsError, r.tolerance, r.skipped, r.expectedSkips);
        if (r.timed)
        {
            double const gbps = r.bytes / (r.ms * 1e-3) / 1e9;
            std::printf(" %9.4f %10.2f %9.0f %9.4f %6.1f%%", r.ms, r.bytes / 1e6, gbps,
                r.bytes / (dev.peakGBps * 1e9) * 1e3, 100.0 * gbps / dev.peakGBps);
        }
        else
        {
            std::printf(" %9s %10s %9s %9s %7s", "-", "-", "-", "-", "-");
        }
        std::printf("  %s\n", r.ok() ? "ok" : "FAIL");
    }
}

void writeJson(char const* path, Device const& dev, std::vector<Result> const& results, bool ok)
{
    FILE* f = std::fopen(path, "w");
    if (f == nullptr)
    {
        throw std::runtime_error(std::string("cannot write ") + path);
    }
    std::fprintf(f,
        "{\n  \"device\": {\"name\": \"%s\", \"compute_capability\": \"%d.%d\", \"peak_gbps\": %.1f, "
        "\"copy_gbps\": %.1f},\n  \"ok\": %s,\n  \"glue\": %s,\n  \"results\": [\n",
        dev.name.c_str(), dev.major, dev.minor, dev.peakGBps, dev.copyGBps, ok ? "true" : "false", kGlue ? "true" : "false");
    for (size_t i = 0; i < results.size(); ++i)
    {
        Result const& r = results[i];
        std::fprintf(f,
            "    {\"op\": \"%s\", \"case\": \"%s\", \"dtype\": \"%s\", \"max_abs_error\": %.6g, \"tolerance\": %.6g, "
            "\"skipped\": %d, \"expected_skipped\": %d, \"ok\": %s",
            r.op.c_str(), r.name.c_str(), r.dtype.c_str(), r.maxAbsError, r.tolerance, r.skipped, r.expectedSkips,
            r.ok() ? "true" : "false");
        if (r.timed)
        {
            double const gbps = r.bytes / (r.ms * 1e-3) / 1e9;
            std::fprintf(f,
                ", \"time_ms\": %.5f, \"bytes\": %.0f, \"gbps\": %.1f, \"floor_ms\": %.5f, \"fraction_of_peak\": %.4f",
                r.ms, r.bytes, gbps, r.bytes / (dev.peakGBps * 1e9) * 1e3, gbps / dev.peakGBps);
        }
        std::fprintf(f, "}%s\n", i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
}

std::vector<Result> runAll(bool small)
{
    std::mt19937 rng(20240611);
    // Sizes in the dims structs: B, N, D, H, W, C, P, K (filled by the generator), Z, Y, X.
    std::vector<BevCase> bev;
    bev.push_back(makeBevCase("small", {2, 2, 8, 4, 6, 16, 0, 0, 1, 8, 8}, 0.7, false, 0, false, rng));
    bev.push_back(makeBevCase("messy-C1", {1, 3, 5, 3, 4, 1, 0, 0, 2, 3, 3}, 0.9, true, 5, false, rng));
    bev.push_back(makeBevCase("messy-C80", {2, 2, 10, 4, 8, 80, 0, 0, 1, 16, 16}, 0.5, true, 17, false, rng));
    if (!small)
    {
        bev.push_back(makeBevCase("bevdet-6x59x16x44-128x128", {1, 6, 59, 16, 44, 80, 0, 0, 1, 128, 128}, 0.8,
            false, 0, true, rng));
        bev.push_back(makeBevCase("bevdepth-6x112x16x44-128x128", {1, 6, 112, 16, 44, 80, 0, 0, 1, 128, 128}, 0.6,
            false, 0, true, rng));
    }
    // B, P, C, ny, nx.
    std::vector<PillarCase> pillars;
    pillars.push_back(makePillarCase("small", {2, 100, 8, 10, 12}, {100, 0}, false, 0, false, rng));
    pillars.push_back(makePillarCase("messy", {3, 64, 5, 9, 8}, {60, 64, 33}, true, 6, false, rng));
    if (!small)
    {
        pillars.push_back(
            makePillarCase("pointpillars-12k-496x432", {2, 12000, 64, 496, 432}, {12000, 9000}, false, 0, true, rng));
    }

    std::vector<Result> results;
    for (deploykit_dtype dtype : {DEPLOYKIT_FLOAT32, DEPLOYKIT_FLOAT16})
    {
        for (BevCase const& c : bev)
        {
            for (Result const& r : runBev(c, dtype))
            {
                results.push_back(r);
            }
        }
        for (PillarCase const& c : pillars)
        {
            for (Result const& r : runPillars(c, dtype))
            {
                results.push_back(r);
            }
        }
    }
    return results;
}

} // namespace

int main(int argc, char** argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    {
        std::fprintf(stderr, "deploykit_gpu_check: no usable CUDA device\n");
        return 2;
    }
#ifdef DEPLOYKIT_WITH_GLUE
    static Finder finder;
    setLoggerFinder(&finder);
#endif
    char const* json = nullptr;
    bool small = false;
    for (int i = 1; i < argc; ++i)
    {
        if (std::string(argv[i]) == "--small")
        {
            small = true;
        }
        else
        {
            json = argv[i];
        }
    }
    try
    {
        Device const dev = describeDevice();
        std::vector<Result> const results = runAll(small);
        bool const ok = std::all_of(results.begin(), results.end(), [](Result const& r) { return r.ok(); });
        printTable(dev, results);
        if (json != nullptr)
        {
            writeJson(json, dev, results, ok);
        }
        return ok ? 0 : 1;
    }
    catch (std::exception const& e)
    {
        std::fprintf(stderr, "deploykit_gpu_check: %s\n", e.what());
        return 1;
    }
}
