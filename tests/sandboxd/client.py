#!/usr/bin/env python3
"""A real agent-sandbox client — the official Python client
(`k8s-agent-sandbox`, pinned in tests/mcp/requirements.txt) — driving
`cc_server sandboxd` on loopback for the black-box tests
(tests/integration/sandboxd.rs) and bench/sandboxd.

    client.py REST_PORT GRPC_PORT < ops.json

The client's own classes do what they can reach without a cluster: its
`CommandExecutor` (`run`: the ProcessService's Execute) and its
`Filesystem` (write, read, list, exists, delete), both over its
`SandboxConnector` with a `SandboxdInClusterConnectionConfig` whose pod IP
is 127.0.0.1. The client has no API for Start, WriteStdin, SendSignal or
ResizeTTY: those are driven with the ProcessService stubs the same wheel
ships (`k8s_agent_sandbox._proto`, generated from the published .proto).

Operations, one JSON line of result each:

    {"op": "run", "command": "echo hi", "env": {}, "cwd": null}   official: CommandExecutor.run
    {"op": "write", "path": "a/b", "data": "text"}                official: Filesystem.write
    {"op": "read" | "list" | "exists", "path": "a/b"}             official: Filesystem.*
    {"op": "delete", "path": "a", "recursive": false}             official: Filesystem.delete
    {"op": "execute", "argv": [...], "env": {}, "cwd": null}      stubs: Execute
    {"op": "start", "argv": [...], "pty": [cols, rows] | null,
     "steps": [{"wait": "text"}, {"stdin": "data"}, {"eof": true},
               {"signal": "SIGNAL_SIGTERM"}, {"resize": [c, r]}]} stubs: Start and the rest
    {"op": "rpc", "method": "Execute", "request": {...},
     "metadata": [["authorization", "Bearer ..."]]}              stubs: any unary call
    {"op": "raw", "method": "Execute", "hex": "..."}              bytes as the request
    {"op": "http", "method": "GET", "path": "/v1/...", "data": "", "size": N,
     "multipart": false}                                          raw HTTP
    {"op": "repeat", "n": 100, "of": {...}}                        timing: {"seconds": s}

A failed call is {"ok": false, "error": ..., "status": N | "code": "GRPC_CODE"}.
"""

import json
import sys
import threading
import time

import grpc
import requests
from google.protobuf import json_format

from k8s_agent_sandbox.connector import SandboxConnector
from k8s_agent_sandbox.models import SandboxdInClusterConnectionConfig
from k8s_agent_sandbox.commands.command_executor import CommandExecutor
from k8s_agent_sandbox.commands._process_stubs import process_pb2, process_pb2_grpc
from k8s_agent_sandbox.files.filesystem import Filesystem
from k8s_agent_sandbox.exceptions import SandboxRequestError


class Client:
    def __init__(self, rest_port, grpc_port):
        self.rest = f"http://127.0.0.1:{rest_port}"
        config = SandboxdInClusterConnectionConfig(
            mode="in-cluster-pod-ip", rest_port=rest_port, grpc_port=grpc_port)
        self.connector = SandboxConnector(
            "cc-test", "default", config, k8s_helper=None, get_pod_ip=lambda: "127.0.0.1")
        self.commands = CommandExecutor(self.connector, None, "cc-test")
        self.files = Filesystem(self.connector, None, "cc-test")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        self.stub = process_pb2_grpc.ProcessServiceStub(self.channel)

    def config(self, op):
        return process_pb2.ProcessConfig(
            command=op["argv"], env_vars=op.get("env") or {}, cwd=op.get("cwd"))

    def run_op(self, op):
        kind = op["op"]
        if kind == "run":
            r = self.commands.run(op["command"], env=op.get("env"), cwd=op.get("cwd"))
            return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code}
        if kind == "write":
            data = op["data"].encode() if "data" in op else b"x" * op["size"]
            self.files.write(op["path"], data, allow_unsafe_paths=op.get("unsafe", False))
            return {}
        if kind == "read":
            data = self.files.read(op["path"], allow_unsafe_paths=op.get("unsafe", False))
            return {"data": data.decode("utf-8", "replace"), "size": len(data)}
        if kind == "list":
            return {"entries": [{"name": e.name, "type": e.type, "size": e.size, "mode": e.mode}
                                for e in self.files.list(op["path"])]}
        if kind == "exists":
            return {"exists": self.files.exists(op["path"])}
        if kind == "delete":
            self.files.delete(op["path"], recursive=op.get("recursive", False))
            return {}
        if kind == "execute":
            r = self.stub.Execute(process_pb2.ExecuteRequest(config=self.config(op)), timeout=60)
            return {"exit_code": r.exit_code, "stdout": r.stdout.decode("utf-8", "replace"),
                    "stderr": r.stderr.decode("utf-8", "replace")}
        if kind == "start":
            return self.start(op)
        if kind == "rpc":
            method = getattr(self.stub, op["method"])
            request_type = getattr(process_pb2, op["method"] + "Request")
            request = json_format.ParseDict(op.get("request", {}), request_type())
            metadata = [tuple(m) for m in op.get("metadata", [])]
            return {"response": json_format.MessageToDict(
                method(request, timeout=30, metadata=metadata))}
        if kind == "raw":
            call = self.channel.unary_unary(
                f"/process.v1.ProcessService/{op['method']}",
                request_serializer=lambda b: b, response_deserializer=lambda b: b)
            return {"bytes": len(call(bytes.fromhex(op["hex"]) * op.get("times", 1), timeout=30))}
        if kind == "http":
            data = op.get("data", "").encode() if "size" not in op else b"x" * op["size"]
            if op.get("multipart"):
                r = requests.request(op["method"], self.rest + op["path"],
                                     files={"file": ("upload", data)}, timeout=60)
            else:
                r = requests.request(op["method"], self.rest + op["path"], data=data or None,
                                     headers=op.get("headers", {}), timeout=60)
            try:
                body = r.json()
            except ValueError:
                body = r.text
            return {"status": r.status_code, "body": body, "headers": dict(r.headers)}
        if kind == "repeat":
            start = time.monotonic()
            for _ in range(op["n"]):
                self.run_op(op["of"])
            return {"seconds": time.monotonic() - start}
        raise ValueError(f"unknown op {kind}")

    def start(self, op):
        pty = op.get("pty")
        request = process_pb2.StartRequest(config=self.config(op))
        if pty:
            request.pty.cols, request.pty.rows = pty
        call = self.stub.Start(request, timeout=60)
        seen = {"stdout": b"", "stderr": b"", "pid": None, "exit_code": None, "error": None}
        ready = threading.Condition()

        def read():
            try:
                for event in call:
                    which = event.WhichOneof("event")
                    with ready:
                        if which == "init":
                            seen["pid"] = event.init.process_id
                        elif which in ("stdout", "stderr"):
                            seen[which] += getattr(event, which)
                        elif which == "exit":
                            seen["exit_code"] = event.exit.exit_code
                        ready.notify_all()
            except grpc.RpcError as e:
                seen["error"] = {"code": e.code().name, "details": e.details()}
            with ready:
                seen["done"] = True
                ready.notify_all()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        steps = []

        def wait(cond, secs=30):
            deadline = time.monotonic() + secs
            with ready:
                while not cond() and time.monotonic() < deadline:
                    ready.wait(0.1)
                return cond()

        wait(lambda: seen["pid"] is not None or seen.get("done"))
        pid = seen["pid"]
        for step in op.get("steps", []):
            try:
                if "wait" in step:
                    text = step["wait"].encode()
                    steps.append({"ok": wait(lambda: text in seen["stdout"] or seen.get("done"))
                                  and text in seen["stdout"]})
                    continue
                if "stdin" in step:
                    self.stub.WriteStdin(process_pb2.WriteStdinRequest(
                        process_id=step.get("pid", pid), input=step["stdin"].encode()), timeout=30)
                elif "eof" in step:
                    r = process_pb2.WriteStdinRequest(process_id=step.get("pid", pid))
                    r.eof.SetInParent()
                    self.stub.WriteStdin(r, timeout=30)
                elif "signal" in step:
                    self.stub.SendSignal(process_pb2.SendSignalRequest(
                        process_id=step.get("pid", pid),
                        signal=process_pb2.Signal.Value(step["signal"])), timeout=30)
                elif "resize" in step:
                    cols, rows = step["resize"]
                    self.stub.ResizeTTY(process_pb2.ResizeTTYRequest(
                        process_id=step.get("pid", pid), cols=cols, rows=rows), timeout=30)
                steps.append({"ok": True})
            except grpc.RpcError as e:
                steps.append({"ok": False, "code": e.code().name, "details": e.details()})
        wait(lambda: seen.get("done"), 60)
        return {"pid": pid, "stdout": seen["stdout"].decode("utf-8", "replace"),
                "stderr": seen["stderr"].decode("utf-8", "replace"),
                "exit_code": seen["exit_code"], "error": seen["error"], "steps": steps}


def main():
    client = Client(int(sys.argv[1]), int(sys.argv[2]))
    for op in json.load(sys.stdin):
        try:
            result = {"ok": True, **client.run_op(op)}
        except grpc.RpcError as e:
            result = {"ok": False, "code": e.code().name, "error": e.details()}
        except SandboxRequestError as e:
            body = None
            if e.response is not None:
                try:
                    body = e.response.json()
                except ValueError:
                    body = e.response.text
            result = {"ok": False, "status": e.status_code, "error": str(e), "body": body}
        except Exception as e:  # the client's own refusals (ValueError, RuntimeError)
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
