// Exercises libdeploykit_plugins.so through TensorRT's plugin interfaces, without a GPU and
// without libnvinfer: creator discovery, attribute validation, output types and shapes, format
// support, shape checks and the serialize/deserialize round trip (enqueue needs a GPU: see
// gpu_check). Prints the creators as JSON on stdout, for comparison with the op yaml files, and
// each failed check on stderr; exits 1 if any failed.
#include <NvInferRuntime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/trt_plugin.h"

using namespace nvinfer1;

namespace
{

int gFailures = 0;

void expect(bool ok, std::string const& what)
{
    if (!ok)
    {
        ++gFailures;
        std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    }
}

class CapturingLogger final : public ILogger
{
public:
    void log(Severity severity, AsciiChar const* msg) noexcept override
    {
        if (severity <= Severity::kERROR)
        {
            mLast = msg;
        }
    }

    // The last error since the previous call.
    std::string take()
    {
        return std::move(mLast);
    }

private:
    std::string mLast;
};

class Finder final : public ILoggerFinder
{
public:
    ILogger* findLogger() override
    {
        return &logger;
    }
    CapturingLogger logger;
};

// TensorRT's IExprBuilder and IDimensionExpr forward to implementation objects (apiv::VExprBuilder,
// apiv::VDimensionExpr). These evaluate constant expressions, enough to run getOutputShapes here.
class ConstantImpl final : public apiv::VDimensionExpr
{
public:
    explicit ConstantImpl(int64_t value)
        : mValue(value)
    {
    }
    bool isConstant() const override
    {
        return true;
    }
    int64_t getConstantValue() const override
    {
        return mValue;
    }
    bool isSizeTensor() const override
    {
        return false;
    }

private:
    int64_t mValue;
};

class Constant final : public IDimensionExpr
{
public:
    explicit Constant(int64_t value)
        : mValue(value)
    {
        mImpl = &mValue;
    }

private:
    ConstantImpl mValue;
};

int64_t floorDiv(int64_t a, int64_t b)
{
    int64_t const q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

class ExprBuilderImpl final : public apiv::VExprBuilder
{
public:
    IDimensionExpr const* constant(int64_t value) override
    {
        mExprs.push_back(std::make_unique<Constant>(value));
        return mExprs.back().get();
    }

    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& first, IDimensionExpr const& second) override
    {
        int64_t const a = first.getConstantValue();
        int64_t const b = second.getConstantValue();
        switch (op)
        {
        case DimensionOperation::kSUM: return constant(a + b);
        case DimensionOperation::kPROD: return constant(a * b);
        case DimensionOperation::kMAX: return constant(std::max(a, b));
        case DimensionOperation::kMIN: return constant(std::min(a, b));
        case DimensionOperation::kSUB: return constant(a - b);
        case DimensionOperation::kEQUAL: return constant(a == b);
        case DimensionOperation::kLESS: return constant(a < b);
        case DimensionOperation::kFLOOR_DIV: return constant(floorDiv(a, b));
        case DimensionOperation::kCEIL_DIV: return constant(-floorDiv(-a, b));
        }
        return nullptr;
    }

    // Size tensors belong to data-dependent outputs, which these plugins do not have.
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override
    {
        return nullptr;
    }

private:
    std::vector<std::unique_ptr<Constant>> mExprs;
};

class ExprBuilder final : public IExprBuilder
{
public:
    ExprBuilder()
    {
        mImpl = &mBuilder;
    }

private:
    ExprBuilderImpl mBuilder;
};

Dims dims(std::vector<int64_t> const& values)
{
    Dims d{};
    d.nbDims = static_cast<int32_t>(values.size());
    for (size_t i = 0; i < values.size(); ++i)
    {
        d.d[i] = values[i];
    }
    return d;
}

std::string text(Dims const& d)
{
    std::string s = "(";
    for (int32_t i = 0; i < d.nbDims; ++i)
    {
        s += (i ? ", " : "") + std::to_string(d.d[i]);
    }
    return s + ")";
}

// What one plugin is checked with; inputs[0] is the float input that sets the output type.
struct OpCase
{
    char const* name;
    char const* attribute;
    std::vector<int32_t> values;
    std::vector<Dims> inputs;
    Dims output;
    std::vector<DataType> types; // inputs then output, a supported combination
    std::vector<Dims> mismatched;
};

std::vector<OpCase> opCases()
{
    auto const f = DataType::kFLOAT;
    auto const i = DataType::kINT32;
    return {
        {"BEVPoolV2", "bev_shape", {1, 8, 6},
            {dims({2, 3, 4, 5, 7}), dims({2, 3, 5, 7, 16}), dims({50}), dims({50}), dims({50}), dims({9}), dims({9})},
            dims({2, 1, 8, 6, 16}), {f, f, i, i, i, i, i, f},
            {dims({2, 3, 4, 5, 7}), dims({2, 3, 5, 6, 16}), dims({50}), dims({50}), dims({50}), dims({9}), dims({9})}},
        {"PillarScatter", "grid", {12, 10}, {dims({2, 40, 16}), dims({2, 40, 4}), dims({2})}, dims({2, 16, 12, 10}),
            {f, i, i, f}, {dims({2, 40, 16}), dims({2, 40, 3}), dims({2})}},
    };
}

PluginFieldCollection fieldsOf(PluginField const& field)
{
    return PluginFieldCollection{1, &field};
}

IPluginCreatorV3One* findCreator(char const* name)
{
    int32_t count = 0;
    IPluginCreatorInterface* const* creators = getCreators(count);
    for (int32_t i = 0; i < count; ++i)
    {
        auto* creator = static_cast<IPluginCreatorV3One*>(creators[i]);
        if (std::string(creator->getPluginName()) == name)
        {
            return creator;
        }
    }
    return nullptr;
}

void checkRejected(IPluginCreatorV3One& creator, PluginFieldCollection const& fc, CapturingLogger& logger,
    std::string const& message, std::string const& what)
{
    std::unique_ptr<IPluginV3> plugin(creator.createPlugin("node", &fc, TensorRTPhase::kBUILD));
    std::string const logged = logger.take();
    expect(plugin == nullptr, what + ": createPlugin must fail");
    expect(logged.find(message) != std::string::npos, what + ": logged '" + logged + "', expected '" + message + "'");
}

void checkAttributes(OpCase const& op, IPluginCreatorV3One& creator, CapturingLogger& logger)
{
    std::string const name = op.name;
    std::string const attribute = std::string("'") + op.attribute + "'";
    PluginFieldCollection const none{0, nullptr};
    checkRejected(creator, none, logger, "missing required attribute " + attribute, name + " without attributes");

    std::vector<int32_t> const shorter(op.values.begin(), op.values.end() - 1);
    PluginField const shortField(op.attribute, shorter.data(), PluginFieldType::kINT32, int32_t(shorter.size()));
    checkRejected(creator, fieldsOf(shortField), logger, "must have " + std::to_string(op.values.size()) + " values",
        name + " with a short attribute");

    std::vector<int32_t> zero = op.values;
    zero[0] = 0;
    PluginField const zeroField(op.attribute, zero.data(), PluginFieldType::kINT32, int32_t(zero.size()));
    checkRejected(creator, fieldsOf(zeroField), logger, "positive", name + " with a zero attribute value");

    std::vector<int64_t> const wide(op.values.begin(), op.values.end());
    PluginField const wideField(op.attribute, wide.data(), PluginFieldType::kINT64, int32_t(wide.size()));
    auto const wideFields = fieldsOf(wideField);
    std::unique_ptr<IPluginV3> plugin(creator.createPlugin("node", &wideFields, TensorRTPhase::kBUILD));
    expect(plugin != nullptr, name + ": an int64 attribute must be accepted");
}

void checkBuild(OpCase const& op, IPluginV3OneBuild& build, CapturingLogger& logger)
{
    std::string const name = op.name;
    int32_t const nbInputs = int32_t(op.inputs.size());
    expect(build.getNbOutputs() == 1, name + ": one output");

    for (DataType type : {DataType::kFLOAT, DataType::kHALF})
    {
        std::vector<DataType> in(op.types.begin(), op.types.end() - 1);
        for (DataType& t : in)
        {
            t = t == DataType::kINT32 ? t : type;
        }
        DataType out = DataType::kINT8;
        expect(build.getOutputDataTypes(&out, 1, in.data(), nbInputs) == 0 && out == type,
            name + ": the output takes the float input's type");
    }

    ExprBuilder exprBuilder;
    std::vector<DimsExprs> in(op.inputs.size());
    for (size_t t = 0; t < op.inputs.size(); ++t)
    {
        in[t].nbDims = op.inputs[t].nbDims;
        for (int32_t k = 0; k < op.inputs[t].nbDims; ++k)
        {
            in[t].d[k] = exprBuilder.constant(op.inputs[t].d[k]);
        }
    }
    DimsExprs out{};
    expect(build.getOutputShapes(in.data(), nbInputs, nullptr, 0, &out, 1, exprBuilder) == 0,
        name + ": getOutputShapes succeeds");
    Dims got{};
    got.nbDims = out.nbDims;
    for (int32_t k = 0; k < out.nbDims; ++k)
    {
        got.d[k] = out.d[k]->getConstantValue();
    }
    expect(text(got) == text(op.output), name + ": output shape " + text(got) + ", expected " + text(op.output));

    std::vector<DynamicPluginTensorDesc> desc(op.types.size());
    for (size_t t = 0; t < op.types.size(); ++t)
    {
        desc[t].desc.type = op.types[t];
        desc[t].desc.format = TensorFormat::kLINEAR;
        desc[t].desc.dims = t < op.inputs.size() ? op.inputs[t] : op.output;
    }
    for (int32_t pos = 0; pos <= nbInputs; ++pos)
    {
        expect(build.supportsFormatCombination(pos, desc.data(), nbInputs, 1),
            name + ": supports position " + std::to_string(pos));
    }
    auto rejects = [&](int32_t pos, DataType type, TensorFormat format, std::string const& what) {
        auto changed = desc;
        changed[pos].desc.type = type;
        changed[pos].desc.format = format;
        expect(!build.supportsFormatCombination(pos, changed.data(), nbInputs, 1), name + ": rejects " + what);
    };
    rejects(0, DataType::kINT8, TensorFormat::kLINEAR, "int8 input 0");
    rejects(1, op.types[1] == DataType::kINT32 ? DataType::kFLOAT : DataType::kHALF, TensorFormat::kLINEAR,
        "a wrong type at input 1");
    rejects(nbInputs, DataType::kHALF, TensorFormat::kLINEAR, "a float16 output for float32 inputs");
    rejects(0, DataType::kFLOAT, TensorFormat::kCHW4, "a non-linear format");

    for (auto& d : desc)
    {
        d.desc.dims.d[0] = -1; // dynamic batch at build time
    }
    expect(build.configurePlugin(desc.data(), nbInputs, &desc[nbInputs], 1) == 0,
        name + ": configurePlugin accepts dynamic dims (" + logger.take() + ")");
    for (size_t t = 0; t < op.mismatched.size(); ++t)
    {
        desc[t].desc.dims = op.mismatched[t];
    }
    expect(build.configurePlugin(desc.data(), nbInputs, &desc[nbInputs], 1) != 0 && !logger.take().empty(),
        name + ": configurePlugin rejects and logs mismatched input shapes");
}

void checkRuntime(OpCase const& op, IPluginV3& plugin, IPluginCreatorV3One& creator, CapturingLogger& logger)
{
    std::string const name = op.name;
    auto* runtime = static_cast<IPluginV3OneRuntime*>(plugin.getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    std::vector<PluginTensorDesc> desc(op.types.size());
    for (size_t t = 0; t < op.types.size(); ++t)
    {
        desc[t].type = op.types[t];
        desc[t].format = TensorFormat::kLINEAR;
        desc[t].dims = t < op.inputs.size() ? op.inputs[t] : op.output;
    }
    int32_t const nbInputs = int32_t(op.inputs.size());
    expect(runtime->onShapeChange(desc.data(), nbInputs, &desc[nbInputs], 1) == 0,
        name + ": onShapeChange accepts consistent shapes (" + logger.take() + ")");

    // Serialize from a clone whose source is gone, deserialize, serialize again.
    std::unique_ptr<IPluginV3> copy(plugin.clone());
    PluginFieldCollection const* fields
        = static_cast<IPluginV3OneRuntime*>(copy->getCapabilityInterface(PluginCapabilityType::kRUNTIME))
              ->getFieldsToSerialize();
    expect(fields->nbFields == 1 && std::string(fields->fields[0].name) == op.attribute
            && fields->fields[0].type == PluginFieldType::kINT32,
        name + ": serializes one int32 field named " + op.attribute);
    std::unique_ptr<IPluginV3> restored(creator.createPlugin("node", fields, TensorRTPhase::kRUNTIME));
    copy.reset();
    expect(restored != nullptr, name + ": deserializes (" + logger.take() + ")");
    if (restored == nullptr)
    {
        return;
    }
    std::unique_ptr<IPluginV3> attached(
        static_cast<IPluginV3OneRuntime*>(restored->getCapabilityInterface(PluginCapabilityType::kRUNTIME))
            ->attachToContext(nullptr));
    restored.reset();
    PluginField const& again
        = static_cast<IPluginV3OneRuntime*>(attached->getCapabilityInterface(PluginCapabilityType::kRUNTIME))
              ->getFieldsToSerialize()
              ->fields[0];
    std::vector<int32_t> const values(
        static_cast<int32_t const*>(again.data), static_cast<int32_t const*>(again.data) + again.length);
    expect(values == op.values, name + ": the attribute survives clone, serialization and attachToContext");
}

void checkOp(OpCase const& op, CapturingLogger& logger)
{
    IPluginCreatorV3One* creator = findCreator(op.name);
    expect(creator != nullptr, std::string("getCreators lists ") + op.name);
    if (creator == nullptr)
    {
        return;
    }
    checkAttributes(op, *creator, logger);

    PluginField const field(op.attribute, op.values.data(), PluginFieldType::kINT32, int32_t(op.values.size()));
    auto const fc = fieldsOf(field);
    std::unique_ptr<IPluginV3> plugin(creator->createPlugin("node", &fc, TensorRTPhase::kBUILD));
    expect(plugin != nullptr, std::string(op.name) + ": createPlugin with valid attributes (" + logger.take() + ")");
    if (plugin == nullptr)
    {
        return;
    }
    auto* core = static_cast<IPluginV3OneCore*>(plugin->getCapabilityInterface(PluginCapabilityType::kCORE));
    expect(std::string(core->getPluginName()) == creator->getPluginName()
            && std::string(core->getPluginVersion()) == creator->getPluginVersion()
            && std::string(core->getPluginNamespace()) == creator->getPluginNamespace(),
        std::string(op.name) + ": plugin and creator agree on name, version and namespace");
    checkBuild(op, *static_cast<IPluginV3OneBuild*>(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD)),
        logger);
    checkRuntime(op, *plugin, *creator, logger);
}

void printCreators()
{
    int32_t count = 0;
    IPluginCreatorInterface* const* creators = getCreators(count);
    std::printf("{\"creators\": [");
    for (int32_t i = 0; i < count; ++i)
    {
        auto* creator = static_cast<IPluginCreatorV3One*>(creators[i]);
        PluginFieldCollection const* fields = creator->getFieldNames();
        std::printf("%s{\"name\": \"%s\", \"version\": \"%s\", \"namespace\": \"%s\", \"fields\": [", i ? ", " : "",
            creator->getPluginName(), creator->getPluginVersion(), creator->getPluginNamespace());
        for (int32_t f = 0; f < fields->nbFields; ++f)
        {
            PluginField const& field = fields->fields[f];
            std::printf("%s{\"name\": \"%s\", \"type\": \"%s\", \"length\": %d}", f ? ", " : "", field.name,
                field.type == PluginFieldType::kINT32 ? "int32" : "other", field.length);
        }
        std::printf("]}");
    }
    std::printf("], \"tensorrt_headers\": [%d, %d, %d]}\n", deploykit_tensorrt_headers[0], deploykit_tensorrt_headers[1],
        deploykit_tensorrt_headers[2]);
}

} // namespace

int main()
{
    Finder finder;
    setLoggerFinder(&finder);
    for (OpCase const& op : opCases())
    {
        checkOp(op, finder.logger);
    }
    printCreators();
    if (gFailures > 0)
    {
        std::fprintf(stderr, "%d check(s) failed\n", gFailures);
        return 1;
    }
    return 0;
}
