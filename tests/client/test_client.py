"""The Python client against in-process LM servers (MockEngine), addressed directly.

Location watching through the admin is covered by tests/integration.
"""

from __future__ import annotations

import pytest

from tenor.client import ClientOptions, Model
from tenor.client.client import extra_inputs
from tenor.client.location import ModelNotFoundError, NoReplicaError, RetryPolicy
from tenor.engine.api import EngineError, InvalidRequestError
from tenor.errors import UserError
from tests.fakes.cell import free_port
from tests.server.lm_servers import LMServerThread

MODEL = "/tenor/test/lm"


def dead_address() -> str:
    """An address nothing listens on."""
    return f"127.0.0.1:{free_port()}"


def model(*addresses: str, timeout_s: float = 10.0) -> Model:
    return Model(MODEL, ClientOptions(timeout_s=timeout_s, addresses=addresses, retry=RetryPolicy(max_backoff_s=0.05)))


def test_generate_score_and_stream_through_two_balanced_replicas():
    with LMServerThread([MODEL]) as one, LMServerThread([MODEL]) as two, model(one.address, two.address) as m:
        lm = m.lm()
        for _ in range(4):
            assert [(s.text, s.score) for s in lm.generate("abc", {"per_example_max_decode_steps": 4})] == [
                ("defg", -2.0)
            ]
        assert lm.score("ab", ["c", "de"]) == [-0.25, -0.5]
        acc = ""
        for items in lm.generate_stream("abc", {"per_example_max_decode_steps": 3}):
            acc = acc[: items[0].prefix_len] + items[0].text
        assert acc == "def"
        assert len(one.models.latencies) >= 2 and len(two.models.latencies) >= 2


def test_dead_and_overloaded_replicas_are_skipped():
    with LMServerThread([MODEL], max_waiting=0) as full, LMServerThread([MODEL]) as good:
        with model(dead_address(), full.address, good.address) as m:
            lm = m.lm()
            for _ in range(6):
                assert lm.generate("abc")[0].text
            streamed = [items for items in lm.generate_stream("xy", {"per_example_max_decode_steps": 2})]
            assert len(streamed) == 2
        assert len(good.models.latencies) == 7
        assert full.models.latencies == []


def test_no_live_replica_gives_up_at_the_deadline():
    with model(dead_address(), timeout_s=0.3) as m:
        with pytest.raises(NoReplicaError, match="UNAVAILABLE"):
            m.lm().generate("abc")


def test_replica_without_the_model_is_retried_elsewhere():
    with LMServerThread(["/tenor/test/other"]) as wrong, LMServerThread([MODEL]) as right:
        with model(wrong.address, right.address) as m:
            for _ in range(3):
                assert m.lm().generate("abc")[0].text
        with model(wrong.address, timeout_s=0.3) as m, pytest.raises(NoReplicaError, match="NOT_FOUND"):
            m.lm().generate("abc")


def test_bad_input_is_a_one_line_invalid_request_error_and_not_retried():
    with LMServerThread([MODEL]) as server, model(server.address) as m:
        with pytest.raises(InvalidRequestError) as failed:
            m.lm().generate("abc", {"temprature": 0.5})
        assert "temprature" in str(failed.value) and "\n" not in str(failed.value)
        assert server.models.latencies == []
        with pytest.raises(InvalidRequestError, match="at least one suffix"):
            m.lm().score("ab", [])
        assert m.lm().generate("abc")[0].text  # still serving


def test_stream_error_after_the_first_message_is_raised_not_retried():
    with LMServerThread([MODEL], step_delay_s=0.05) as dying, LMServerThread([MODEL]) as spare:
        with model(dying.address, spare.address) as m:
            stream = m.lm().generate_stream("a", {"per_example_max_decode_steps": 100})
            next(stream)
            # Whichever replica answered first dies; the other one must not restart the
            # answer behind the caller's back.
            dying.kill()
            spare.kill()
            with pytest.raises(EngineError) as failed:
                for _ in stream:
                    pass
        assert failed.value.__class__ is not NoReplicaError
        assert len(dying.models.latencies) + len(spare.models.latencies) == 0


def test_extra_inputs_split_numbers_and_strings():
    message = extra_inputs({"temperature": 0.5, "seed": 3, "mode": "fast"})
    assert dict(message.items) == {"temperature": 0.5, "seed": 3.0}
    assert dict(message.strings) == {"mode": "fast"}
    with pytest.raises(InvalidRequestError, match="number or a string"):
        extra_inputs({"temperature": True})


@pytest.mark.parametrize("name", ["tenor/test/lm", "/tenor/test", "/sax/test/lm", "/tenor/te st/lm"])
def test_malformed_model_names_are_user_errors(name):
    with pytest.raises(UserError, match="bad"):
        Model(name)


def test_client_options_reject_nonsense():
    with pytest.raises(ValueError, match="timeout_s"):
        ClientOptions(timeout_s=0)


def test_model_not_found_error_is_a_user_error():
    assert issubclass(ModelNotFoundError, UserError)
