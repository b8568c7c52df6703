#!/usr/bin/env python3
"""Compares sandboxd/proto/process/v1/process.proto, compiled here with
grpcio-tools, with the descriptor the official client (k8s-agent-sandbox)
carries in its generated process_pb2: every message, field number, type,
label and oneof, every enum value and every RPC must be the same, or the
two do not interoperate. Prints "same" or the differences (exit 1).

    wire_check.py PROTO_ROOT
"""

import sys

from google.protobuf import descriptor_pb2
from grpc_tools import protoc
import grpc_tools

from k8s_agent_sandbox.commands._process_stubs import process_pb2


def shape(fd):
    out = {}
    for m in fd.message_type:
        walk_message(m, "." + fd.package, out)
    for e in fd.enum_type:
        out["enum " + e.name] = sorted((v.name, v.number) for v in e.value)
    for s in fd.service:
        for m in s.method:
            out[f"rpc {s.name}/{m.name}"] = (m.input_type, m.output_type,
                                             m.client_streaming, m.server_streaming)
    return out


def walk_message(m, prefix, out):
    name = f"{prefix}.{m.name}"
    oneofs = [o.name for o in m.oneof_decl]
    out["message " + name] = sorted(
        (f.name, f.number, f.type, f.label, f.type_name, f.proto3_optional,
         oneofs[f.oneof_index] if f.HasField("oneof_index") else None)
        for f in m.field)
    for n in m.nested_type:
        walk_message(n, name, out)


def ours(root):
    out_file = "/dev/stdout"
    import tempfile, os
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "set.pb")
        include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        code = protoc.main(["protoc", f"-I{root}", f"-I{include}",
                            f"--descriptor_set_out={path}", "process/v1/process.proto"])
        if code != 0:
            sys.exit(f"protoc failed ({code})")
        files = descriptor_pb2.FileDescriptorSet()
        with open(path, "rb") as f:
            files.ParseFromString(f.read())
    return next(f for f in files.file if f.name == "process/v1/process.proto")


def theirs():
    fd = descriptor_pb2.FileDescriptorProto()
    process_pb2.DESCRIPTOR.CopyToProto(fd)
    return fd


def main():
    a, b = shape(ours(sys.argv[1])), shape(theirs())
    diffs = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    for k in diffs:
        print(f"{k}:\n  ours:   {a.get(k)}\n  theirs: {b.get(k)}")
    if diffs:
        sys.exit(1)
    print("same")


if __name__ == "__main__":
    main()
