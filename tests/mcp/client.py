#!/usr/bin/env python3
"""A real MCP client — the official Python SDK (`mcp`, pinned in
requirements.txt beside this file) — driving cc_server's agent tools for the
black-box tests (tests/integration/mcp.rs) and the benchmark (bench/mcp).

    client.py [--mode auto|legacy] stdio -- CMD ARG...   < ops.json
    client.py [--mode auto|legacy] http URL [CREDENTIAL] < ops.json

ops.json is a list of operations run in order in one client:

    {"op": "list_tools"}
    {"op": "call", "name": "read", "args": {...}, "cancel_after": 1.5, "repeat": 100}
    {"op": "list_resources"}
    {"op": "read_resource", "uri": "sandbox://handle"}
    {"op": "wait_for_file", "path": "/tmp/x", "secs": 30}

Each prints one JSON line: {"ok": true, "result": ...} or {"ok": false,
"error": "...", "code": N} for an MCP error. A call's result holds
`is_error`, `structured`, `text`, and the `progress` messages that arrived.
`repeat` makes the same call N times; `seconds` is the time of the whole loop.
"""

import json
import os
import sys
import time

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.client.streamable_http import streamable_http_client


def call_result(result, progress):
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "text": [getattr(c, "text", None) for c in result.content],
        "progress": progress,
    }


async def run_op(client, op):
    kind = op["op"]
    if kind == "list_tools":
        tools = await client.list_tools()
        return {"tools": sorted(t.name for t in tools.tools),
                "schemas": {t.name: t.input_schema for t in tools.tools}}
    if kind == "list_resources":
        resources = await client.list_resources()
        return {"resources": sorted(r.uri for r in resources.resources)}
    if kind == "read_resource":
        read = await client.read_resource(op["uri"])
        return {"contents": [getattr(c, "text", None) for c in read.contents]}
    if kind == "wait_for_file":
        deadline = time.monotonic() + op.get("secs", 30)
        while not os.path.exists(op["path"]) and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        return {"exists": os.path.exists(op["path"])}
    if kind == "call":
        progress = []

        async def on_progress(done, total, message):
            progress.append(message)

        repeat = op.get("repeat", 1)
        start = time.perf_counter()
        result = None
        if "cancel_after" in op:
            with anyio.move_on_after(op["cancel_after"]) as scope:
                result = await client.call_tool(op["name"], op.get("args", {}),
                                                progress_callback=on_progress)
            if scope.cancelled_caught:
                return {"cancelled": True, "progress": progress}
        else:
            for _ in range(repeat):
                result = await client.call_tool(op["name"], op.get("args", {}),
                                                progress_callback=on_progress)
        out = call_result(result, progress)
        out["seconds"] = time.perf_counter() - start
        return out
    raise ValueError(f"unknown op {kind!r}")


async def main(argv):
    mode = "auto"
    if argv[:1] == ["--mode"]:
        mode, argv = argv[1], argv[2:]
    ops = json.load(sys.stdin)
    http_client = None
    if argv[0] == "stdio":
        command = argv[argv.index("--") + 1:]
        server = StdioServerParameters(command=command[0], args=command[1:],
                                       env=dict(os.environ), cwd=os.getcwd())
        client = Client(server, mode=mode, cache=None)
    elif argv[0] == "http":
        headers = {"Authorization": f"Bearer {argv[2]}"} if len(argv) > 2 else {}
        http_client = create_mcp_http_client(headers=headers)
        client = Client(streamable_http_client(argv[1], http_client=http_client),
                        mode=mode, cache=None)
    else:
        raise SystemExit(__doc__)
    async with client:
        for op in ops:
            try:
                line = {"ok": True, "result": await run_op(client, op)}
            except Exception as e:  # an MCP error or a transport failure
                error = getattr(e, "error", None)
                line = {"ok": False, "error": str(e),
                        "code": getattr(error, "code", None), "kind": type(e).__name__}
            print(json.dumps(line), flush=True)
    if http_client is not None:
        await http_client.aclose()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
