"""Outputs crossing from the step thread to the callers' event loop."""

import asyncio
import threading

from tenor.engine.api import GenerateRequest, SamplingParams
from tenor.engine.request_state import RequestState, post_outputs
from tenor.engine.sampling import SampledToken
from tenor.tokenizer.byte_tokenizer import Utf8ByteTokenizer


def test_a_steps_outputs_reach_every_caller_with_one_wake_up_of_their_loop():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        tokenizer = Utf8ByteTokenizer()
        states = [
            RequestState(GenerateRequest(f"r{i}", (65, 66), SamplingParams(max_tokens=4)), loop, tokenizer, (), 64)
            for i in range(3)
        ]
        wakeups = 0
        threadsafe = loop.call_soon_threadsafe

        def counted(*args):
            nonlocal wakeups
            wakeups += 1
            return threadsafe(*args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]

        def step() -> None:  # the step thread: one token for each request
            for i, state in enumerate(states):
                state.add_token(state.seqs[0], SampledToken(67 + i, -0.5, ()))
            outputs = [(state, state.take_output()) for state in states]
            assert all(output is not None for _, output in outputs)
            assert all(state.take_output() is None for state in states)  # taken once
            post_outputs(outputs)  # type: ignore[arg-type]

        thread = threading.Thread(target=step)
        thread.start()
        thread.join()
        got = [await asyncio.wait_for(state.queue.get(), 5) for state in states]
        assert wakeups == 1
        assert [output.request_id for output in got] == ["r0", "r1", "r2"]
        assert [output.deltas[0].token_ids for output in got] == [(67,), (68,), (69,)]

    asyncio.run(main())


def test_outputs_for_a_closed_loop_are_dropped_quietly():
    loop = asyncio.new_event_loop()
    state = RequestState(GenerateRequest("r", (65,), SamplingParams()), loop, Utf8ByteTokenizer(), (), 64)
    loop.close()
    state.add_token(state.seqs[0], SampledToken(66, 0.0, ()))
    output = state.take_output()
    assert output is not None
    post_outputs([(state, output)])  # no RuntimeError: nobody is listening
