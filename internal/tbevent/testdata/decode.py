"""Decode TensorBoard event files with the protoc-generated event_pb2.

Usage: decode.py PB_DIR EVENTS_DIR. Prints one JSON object per event, in
file-name order. Record framing (length, masked CRC-32C of the length, data,
masked CRC-32C of the data) is checked with a bitwise CRC-32C written here,
independently of the Go table-driven one; a bad CRC or a short record exits 1.
"""
import glob
import json
import os
import struct
import sys

sys.path.insert(0, sys.argv[1])
from tensorboard.compat.proto import event_pb2  # noqa: E402


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        buf = f.read()
    i = 0
    while i < len(buf):
        if len(buf) - i < 12:
            sys.exit(f"{path}: short record header at byte {i}")
        head = buf[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", buf[i + 8:i + 12])
        if hcrc != masked(head):
            sys.exit(f"{path}: bad length CRC at byte {i}")
        data = buf[i + 12:i + 12 + n]
        if len(data) != n or len(buf) < i + 16 + n:
            sys.exit(f"{path}: short record at byte {i}")
        (dcrc,) = struct.unpack("<I", buf[i + 12 + n:i + 16 + n])
        if dcrc != masked(data):
            sys.exit(f"{path}: bad data CRC at byte {i}")
        yield data
        i += 16 + n


def main():
    files = sorted(glob.glob(os.path.join(sys.argv[2], "events.out.tfevents.*")))
    for path in files:
        for data in records(path):
            ev = event_pb2.Event()
            ev.ParseFromString(data)
            out = {"file": os.path.basename(path), "wall_time": ev.wall_time, "step": ev.step,
                   "what": ev.WhichOneof("what")}
            if out["what"] == "file_version":
                out["file_version"] = ev.file_version
            elif out["what"] == "session_log":
                out["status"] = event_pb2.SessionLog.SessionStatus.Name(ev.session_log.status)
            elif out["what"] == "summary":
                vals = []
                for v in ev.summary.value:
                    kind = v.WhichOneof("value")
                    d = {"tag": v.tag, "kind": kind}
                    if kind == "simple_value":
                        d["value"] = v.simple_value
                    elif kind == "tensor":
                        d["dtype"] = v.tensor.dtype
                        d["rank"] = len(v.tensor.tensor_shape.dim)
                        d["strings"] = [s.decode("utf-8") for s in v.tensor.string_val]
                        d["plugin"] = v.metadata.plugin_data.plugin_name
                        d["data_class"] = v.metadata.data_class
                    vals.append(d)
                out["values"] = vals
            print(json.dumps(out))


main()
