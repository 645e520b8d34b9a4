"""The weight protocol (``agentgym.transport.weights``): its messages round trip and refuse
anything malformed, it imports without torch, and tensors survive the trip as blobs."""

import subprocess
import sys

import msgpack
import numpy as np
import pytest

from agentgym.transport.weights import protocol
from agentgym.transport.weights.protocol import TensorBlob, WeightReply, WeightRequest
from agentgym.transport.wire import WireError


def _tamper(buf: bytes, **changes) -> bytes:
    msg = msgpack.unpackb(buf)
    msg.update(changes)
    return msgpack.packb(msg)


def test_the_protocol_and_the_wire_import_without_torch():
    check = (
        "import sys, agentgym.transport, agentgym.transport.wire, "
        "agentgym.transport.weights.protocol; print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(
    "buf", [b"", b"\xc1", b"garbage", msgpack.packb([1, 2]), msgpack.packb({})]
)
def test_a_garbage_weight_request_is_rejected(buf):
    with pytest.raises(WireError):
        protocol.decode_weight_request(buf)


def test_weight_request_and_reply_round_trip():
    req = WeightRequest(request_id=9, have_version=3, chunk=2, version=5)
    assert protocol.decode_weight_request(protocol.encode_weight_request(req)) == req
    with pytest.raises(WireError, match="snapshot version"):
        protocol.decode_weight_request(
            protocol.encode_weight_request(WeightRequest(1, 0, chunk=1, version=None))
        )
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    bf16 = TensorBlob("b", "bfloat16", (2,), b"\x80\x3f\x00\x40")
    reply = WeightReply(9, "ok", 5, 1, 3, (TensorBlob("a", "float32", (2, 3), a.data), bf16))
    frames = protocol.encode_weight_reply(reply)
    out = protocol.decode_weight_reply([bytes(f) for f in frames])
    assert (out.request_id, out.status, out.version, out.chunk, out.num_chunks) == (
        9,
        "ok",
        5,
        1,
        3,
    )
    assert np.array_equal(out.tensors[0].to_numpy(), a)
    assert out.tensors[1].dtype == "bfloat16" and bytes(out.tensors[1].data) == bf16.data


def test_weight_reply_rejects_missing_frames_and_bad_sizes():
    blob = TensorBlob("a", "float32", (2,), np.zeros(2, np.float32).data)
    reply = WeightReply(1, "ok", 1, 0, 1, (blob,))
    frames = [bytes(f) for f in protocol.encode_weight_reply(reply)]
    with pytest.raises(WireError, match="frames"):
        protocol.decode_weight_reply(frames[:1])
    with pytest.raises(WireError, match="bytes"):
        protocol.decode_weight_reply([frames[0], b"\0" * 7])
    with pytest.raises(WireError, match="status"):
        protocol.decode_weight_reply([_tamper(frames[0], status="maybe"), frames[1]])


def test_tensor_pieces_round_trip_and_bad_offsets_are_refused():
    data = np.arange(6, dtype=np.float32)
    piece = TensorBlob("a", "float32", (2, 3), data[2:5].tobytes(), offset=8)
    assert not piece.whole and piece.nbytes == 24
    reply = protocol.decode_weight_reply(
        protocol.encode_weight_reply(WeightReply(1, "ok", 2, 0, 1, (piece,)))
    )
    (got,) = reply.tensors
    assert got.offset == 8 and got.shape == (2, 3) and bytes(got.data) == data[2:5].tobytes()
    for offset, nbytes in ((2, 4), (-4, 4), (20, 8), (0, 6)):  # unaligned, negative, past end
        with pytest.raises(WireError):
            TensorBlob("a", "float32", (2, 3), b"\0" * nbytes, offset=offset)


def test_bfloat16_tensors_round_trip_through_blobs_and_pieces():
    torch = pytest.importorskip("torch")
    from agentgym.transport.weights.tensors import blobs_to_state_dict, state_dict_to_blobs

    sd = {"w": torch.randn(3, 5).to(torch.bfloat16), "b": torch.arange(4), "e": torch.empty(0)}
    store = protocol.WeightStore(chunk_bytes=8)  # "w" is 30 bytes: it travels in pieces
    store.publish(1, state_dict_to_blobs(sd))
    blobs = []
    for chunk in range(store.answer(WeightRequest(1, -1)).num_chunks):
        blobs.extend(store.answer(WeightRequest(1, -1, chunk, version=1)).tensors)
    assert len(blobs) > len(sd)
    out = blobs_to_state_dict(blobs)
    assert out.keys() == sd.keys()
    for k in sd:
        assert out[k].dtype == sd[k].dtype and torch.equal(out[k], sd[k]), k
