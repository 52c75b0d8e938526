#!/usr/bin/env python3
"""desync_proxy.py PORT_FILE TARGET_PORT [AFTER] - a loopback TCP proxy in front of a DERP relay
that breaks the relay's stream the way a relay with several sends in flight on one socket does
when the first is cut short (issue 11, Hyper-DERP): on each connection, after AFTER RecvPacket
frames (default 20) went to the client, it writes the next frame A cut at 700 bytes, then the
whole frame after it (B), then the rest of A. Everything else passes through unchanged. Listens
on 127.0.0.1:0 and writes the port to PORT_FILE; runs until killed (tests stop it by PID)."""
import asyncio
import os
import sys

CUT = 700
RECV_PACKET = 0x05


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def read_frame(reader):
    head = await reader.readexactly(5)
    return head + await reader.readexactly(int.from_bytes(head[1:5], "big"))


async def server_to_client(reader, writer, after):
    try:
        writer.write(await reader.readuntil(b"\r\n\r\n"))  # the 101 head
        seen = 0
        while True:
            a = await read_frame(reader)
            seen += a[0] == RECV_PACKET
            if seen <= after or a[0] != RECV_PACKET:
                writer.write(a)
            else:
                b = await read_frame(reader)
                writer.write(a[:CUT] + b + a[CUT:])
                await writer.drain()
                break
            await writer.drain()
        await pipe(reader, writer)
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        writer.close()


async def main():
    port_file, target = sys.argv[1], int(sys.argv[2])
    after = int(sys.argv[3]) if len(sys.argv) > 3 else 20

    async def conn(cr, cw):
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, sw), server_to_client(sr, cw, after))

    srv = await asyncio.start_server(conn, "127.0.0.1", 0)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.sockets[0].getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    async with srv:
        await srv.serve_forever()


asyncio.run(main())
