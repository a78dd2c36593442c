"""extract: the subgraph between named tensors, as a model of its own.

``extract: {inputs: [backbone_out], outputs: [head_out]}`` keeps the nodes that compute the outputs
from the inputs. Every tensor the subgraph reads must be one of the inputs, an initializer, or made
inside it; a graph input the subgraph needs but the list lacks is an error that names it.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from deploykit.graph.proto import copy_model, initializer_names, node_label, node_reads, producers
from deploykit.surgery.base import Pass, PassConfigError, PassResult
from deploykit.surgery.cut import check_tensors, typed_value_infos


@dataclass(frozen=True)
class ExtractParams:
    inputs: tuple[str, ...] = ()  # tensors that become the graph inputs, in this order
    outputs: tuple[str, ...] = ()  # tensors that become the graph outputs, in this order


class Extract(Pass):
    name = "extract"
    description = "keep only the subgraph between named input and output tensors"
    Params = ExtractParams

    def requires(self, model: onnx.ModelProto) -> None:
        if not self.params.inputs or not self.params.outputs:
            raise PassConfigError(
                "extract: give both inputs and outputs", hint="e.g. extract: {inputs: [neck_in], outputs: [head_out]}"
            )
        check_tensors(self.name, model, self.params.inputs + self.params.outputs)
        self._nodes(model)

    def _nodes(self, model: onnx.ModelProto) -> list[onnx.NodeProto]:
        """The nodes between inputs and outputs, in graph order; raise when the cut is leaky."""
        g = model.graph
        made, weights = producers(g), initializer_names(g)
        stop = set(self.params.inputs)
        keep: dict[int, onnx.NodeProto] = {}
        todo = [n for n in self.params.outputs if n not in stop]
        while todo:
            name = todo.pop()
            node = made.get(name)
            if node is None:
                if name in weights:
                    continue
                index = next((i for i, n in enumerate(g.node) if name in node_reads(n)), None)
                reader = f" (read by {node_label(g.node[index], index)})" if index is not None else ""
                raise PassConfigError(
                    f"extract: the subgraph also needs graph input {name!r}{reader}, which is not among its inputs",
                    hint=f"add {name!r} to extract's inputs",
                )
            if id(node) in keep:
                continue
            keep[id(node)] = node
            todo.extend(i for i in node_reads(node) if i not in stop)
        return [n for n in g.node if id(n) in keep]

    def run(self, model: onnx.ModelProto) -> PassResult:
        nodes = self._nodes(model)
        names = [*self.params.inputs, *self.params.outputs]
        infos = typed_value_infos(model, names)
        out = copy_model(model)
        g = out.graph
        kept = {id(n) for n in nodes}
        survivors = [n for n, original in zip(g.node, model.graph.node, strict=True) if id(original) in kept]
        copies = [onnx.NodeProto.FromString(n.SerializeToString()) for n in survivors]
        del g.node[:]
        g.node.extend(copies)
        del g.input[:]
        g.input.extend(infos[n] for n in self.params.inputs)
        del g.output[:]
        g.output.extend(infos[n] for n in self.params.outputs)
        read = {i for n in g.node for i in node_reads(n)} | set(self.params.outputs)
        for t in [t for t in g.initializer if t.name not in read or t.name in self.params.inputs]:
            g.initializer.remove(t)
        for vi in [v for v in g.value_info if v.name not in read and v.name not in self.params.outputs]:
            g.value_info.remove(vi)
        return PassResult(
            out, True, details={"nodes_kept": len(nodes), "nodes_dropped": len(model.graph.node) - len(nodes)}
        )
