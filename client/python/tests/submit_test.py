"""Tests of Client.submit's streaming against a scripted fake IngestService stub: batching,
ack accounting, retries of UNAVAILABLE batches and streams, and errors that end the call; and
of the API key the client sends with its streams and unary calls.

The fake stub answers each request as it pulls it, on the calling thread, so every scenario
is deterministic; back-off sleeps are recorded instead of slept.
"""

import os
import unittest
from unittest import mock

import grpc
import pandas as pd

import junit
import verity_client
from verity.v1 import ingest_pb2
from verity.v1 import keys_pb2
from verity.v1 import projects_pb2

UNAVAILABLE = 14
INVALID_ARGUMENT = 3


class FakeRpcError(grpc.RpcError):

    def __init__(self, code, details):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details

    def debug_error_string(self):
        return "fake"


class FakeCall:
    """A SubmitAnnotations call: pulls a batch, answers it with script(batch) (None: end the
    stream there, with OK). With ahead > 1
    it keeps that many batches pulled before answering the oldest, as a server with several
    batches in flight does (at most the client's max_unacked_batches)."""

    def __init__(self, requests, script, sent, ahead=1):
        self._requests, self._script, self._sent = requests, script, sent
        self._ahead = ahead
        self.cancelled = False

    def __iter__(self):
        requests = iter(self._requests)
        pending = []
        while True:
            while len(pending) < self._ahead:
                batch = next(requests, None)
                if batch is None:
                    break
                self._sent.append(batch.batch_id)
                pending.append(batch)
            if not pending:
                return
            answer = self._script(pending.pop(0))
            if answer is None:  # The server ends the stream with OK.
                return
            if isinstance(answer, Exception):
                raise answer
            yield answer

    def cancel(self):
        self.cancelled = True


class FakeIngestStub:
    """Stream i is answered by scripts[i]; records the batch ids each stream carried."""

    def __init__(self, *scripts, ahead=1):
        self._scripts = list(scripts)
        self._ahead = ahead
        self.streams = []   # Batch ids sent, per stream.
        self.timeouts = []
        self.metadata = []
        self.calls = []

    def SubmitAnnotations(self, requests, timeout=None, metadata=None):
        sent = []
        self.streams.append(sent)
        self.timeouts.append(timeout)
        self.metadata.append(metadata)
        call = FakeCall(requests, self._scripts[len(self.streams) - 1], sent, self._ahead)
        self.calls.append(call)
        return call


def ok(batch):
    return ingest_pb2.BatchAck(batch_id=batch.batch_id, accepted=len(batch.annotations))


def frame(rows):
    return pd.DataFrame({"item": ["i%d" % r for r in range(rows)],
                         "annotator": ["w"] * rows, "label": [r % 2 for r in range(rows)]})


class SubmitStreamTest(unittest.TestCase):

    def setUp(self):
        # Integer labels need no GetProject, so the channel never connects.
        self.client = verity_client.Client("localhost:1", timeout=10)
        self.addCleanup(self.client.close)
        sleep = mock.patch("verity_client.client.time.sleep")
        self.sleep = sleep.start()
        self.addCleanup(sleep.stop)

    def use(self, stub):
        self.client._ingest = stub
        return stub

    def test_batches_in_order_and_sums_acks(self):
        def script(batch):
            ack = ok(batch)
            if batch.batch_id == 2:  # Rows 2 and 3: row 3 (index 1) rejected.
                ack.accepted, ack.rejected = 1, 1
                ack.rejections.add(index=1, reason="label 9 out of range [0, 2)")
            if batch.batch_id == 3:  # Row 4: older than the live label.
                ack.accepted, ack.stale = 0, 1
            return ack
        stub = self.use(FakeIngestStub(script))
        progress = []
        result = self.client.submit("p", frame(5), batch_size=2,
                                    progress=lambda a, t: progress.append((a, t)))
        self.assertEqual(stub.streams, [[1, 2, 3]])
        self.assertEqual((result.accepted, result.stale, result.rejected, result.retries),
                         (3, 1, 1, 0))
        self.assertEqual(result.rejections,
                         [verity_client.Rejection(3, "label 9 out of range [0, 2)")])
        self.assertEqual(progress, [(2, 5), (4, 5), (5, 5)])
        self.assertAlmostEqual(stub.timeouts[0], 10 + 5 / 1000.0)
        self.assertFalse(self.sleep.called)

    def test_unavailable_batch_is_resent_on_a_new_stream(self):
        def first(batch):
            if batch.batch_id == 2:
                return ingest_pb2.BatchAck(batch_id=2, error_code=UNAVAILABLE,
                                           error_message="commit queue full")
            return ok(batch)
        stub = self.use(FakeIngestStub(first, ok))
        result = self.client.submit("p", frame(6), batch_size=2, max_unacked_batches=2)
        # The failed stream stops writing after the error; the next resends from batch 2.
        self.assertEqual(stub.streams, [[1, 2], [2, 3]])
        self.assertEqual((result.accepted, result.retries), (6, 1))
        self.sleep.assert_called_once_with(0.2)
        # The second stream's deadline covers only the rows still to send.
        self.assertAlmostEqual(stub.timeouts[1], 10 + 4 / 1000.0)

    def test_batches_acked_behind_a_failed_one_are_resent_but_counted_once(self):
        # Three batches in flight: batch 2 fails, 3 and 4 are acked on the same stream; the
        # next stream resends 2, 3 and 4 in order (so revisions keep their order), and the
        # acks of 3 and 4 count once.
        def first(batch):
            if batch.batch_id == 2:
                return ingest_pb2.BatchAck(batch_id=2, error_code=UNAVAILABLE,
                                           error_message="commit queue full")
            return ok(batch)
        stub = self.use(FakeIngestStub(first, ok, ahead=3))
        result = self.client.submit("p", frame(8), batch_size=2, max_unacked_batches=3)
        self.assertEqual(stub.streams, [[1, 2, 3, 4], [2, 3, 4]])
        self.assertEqual((result.accepted, result.duplicate, result.retries), (8, 0, 1))

    def test_gives_up_after_max_retries_without_progress(self):
        def broken(batch):
            return FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")
        stub = self.use(FakeIngestStub(*[broken] * 3))
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.submit("p", frame(3), batch_size=2, max_retries=2)
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(
            raised.exception.message,
            "gave up after 3 attempts: SubmitAnnotations stream (at batch 1 of 2 (rows 0 to "
            "1)): connection refused")
        self.assertEqual(len(stub.streams), 3)
        self.assertEqual([c.args[0] for c in self.sleep.call_args_list], [0.2, 0.4])

    def test_refused_batch_raises_its_code_and_stops(self):
        def script(batch):
            if batch.batch_id == 2:
                return ingest_pb2.BatchAck(batch_id=2, error_code=INVALID_ARGUMENT,
                                           error_message="more than 10000 annotations")
            return ok(batch)
        stub = self.use(FakeIngestStub(script))
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.submit("p", frame(6), batch_size=2)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(raised.exception.message,
                         "batch 2 of 3 (rows 2 to 3): more than 10000 annotations")
        self.assertEqual(stub.streams, [[1, 2]])
        self.assertTrue(stub.calls[0].cancelled)
        self.assertFalse(self.sleep.called)

    def test_ack_for_the_wrong_batch_is_internal(self):
        self.use(FakeIngestStub(lambda batch: ingest_pb2.BatchAck(batch_id=7)))
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.submit("p", frame(2), batch_size=2)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INTERNAL)
        self.assertIn("got the ack of batch id 7 while expecting batch id 1",
                      raised.exception.message)

    def test_a_stream_ended_before_every_ack_is_an_error(self):
        # Acked means durable and nothing else does: a stream the server ends with OK before
        # acknowledging batch 2 is an error naming it, not a success.
        self.use(FakeIngestStub(lambda batch: ok(batch) if batch.batch_id == 1 else None))
        with self.assertRaises(verity_client.VerityError) as raised:
            self.client.submit("p", frame(4), batch_size=2)
        self.assertEqual(raised.exception.code, grpc.StatusCode.INTERNAL)
        self.assertIn("without acknowledging batch 2 of 2", raised.exception.message)

    def test_empty_frame_sends_nothing(self):
        stub = self.use(FakeIngestStub())
        result = self.client.submit("p", frame(0))
        self.assertEqual(result, verity_client.SubmitResult())
        self.assertEqual(stub.streams, [])

    def test_refuses_bad_batch_size(self):
        with self.assertRaisesRegex(ValueError, "batch_size must be 1 to 10,000"):
            self.client.submit("p", frame(1), batch_size=10001)


    def test_batch_size_bounds_are_inclusive(self):
        # "batch_size (1 to 10,000)": 0 is refused, 1 and 10,000 are accepted.
        with self.assertRaisesRegex(ValueError, "batch_size must be 1 to 10,000"):
            self.client.submit("p", frame(1), batch_size=0)
        stub = self.use(FakeIngestStub(ok, ok))
        self.assertEqual(self.client.submit("p", frame(3), batch_size=10000).accepted, 3)
        self.assertEqual(self.client.submit("p", frame(2), batch_size=1).accepted, 2)
        self.assertEqual(stub.streams, [[1], [1, 2]])

    def test_keeps_only_the_first_max_rejections(self):
        def script(batch):
            ack = ok(batch)
            ack.accepted, ack.rejected = 0, 2
            ack.rejections.add(index=0, reason="first")
            ack.rejections.add(index=1, reason="second")
            return ack
        self.use(FakeIngestStub(script))
        result = self.client.submit("p", frame(4), batch_size=2, max_rejections=3)
        # Every rejection is counted; only the first three are kept, rows as in the frame.
        self.assertEqual(result.rejected, 4)
        self.assertEqual(result.rejections,
                         [verity_client.Rejection(0, "first"),
                          verity_client.Rejection(1, "second"),
                          verity_client.Rejection(2, "first")])

    def test_resource_exhausted_is_retried_and_the_back_off_is_capped(self):
        def busy(batch):
            return FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full")
        stub = self.use(FakeIngestStub(*([busy] * 6 + [ok])))
        result = self.client.submit("p", frame(2), batch_size=2, max_retries=6)
        self.assertEqual((result.accepted, result.retries), (2, 6))
        self.assertEqual(len(stub.streams), 7)
        # Doubling from 0.2 s, at most 5 s.
        self.assertEqual([round(c.args[0], 6) for c in self.sleep.call_args_list],
                         [0.2, 0.4, 0.8, 1.6, 3.2, 5.0])

    def test_progress_resets_the_retry_count_and_the_back_off(self):
        # max_retries counts failures "in a row without progress": a stream that got a batch
        # through starts the count and the back-off afresh.
        def fail_at(batch_id):
            def script(batch):
                if batch.batch_id == batch_id:
                    return ingest_pb2.BatchAck(batch_id=batch_id, error_code=UNAVAILABLE,
                                               error_message="down")
                return ok(batch)
            return script
        stub = self.use(FakeIngestStub(fail_at(2), fail_at(3), ok))
        result = self.client.submit("p", frame(6), batch_size=2, max_unacked_batches=1,
                                    max_retries=1)
        self.assertEqual((result.accepted, result.retries), (6, 2))
        self.assertEqual(stub.streams, [[1, 2], [2, 3], [3]])
        self.assertEqual([c.args[0] for c in self.sleep.call_args_list], [0.2, 0.2])


class FakeUnaryStub:
    """Any unary method: records its metadata and answers an empty response of `response_type`."""

    def __init__(self, response_type):
        self._response_type = response_type
        self.metadata = []

    def __getattr__(self, name):
        def method(request, timeout=None, metadata=None):
            self.metadata.append(metadata)
            return self._response_type()
        return method


class PagedProjectsStub:
    """ListProjects over three pages: "a", "b"; "c"; "d" (tokens "1" and "2")."""

    PAGES = {"": (["a", "b"], "1"), "1": (["c"], "2"), "2": (["d"], "")}

    def __init__(self):
        self.tokens = []

    def ListProjects(self, request, timeout=None, metadata=None):
        self.tokens.append(request.page_token)
        names, token = self.PAGES[request.page_token]
        response = projects_pb2.ListProjectsResponse(next_page_token=token)
        for name in names:
            response.projects.add(name=name, classes=["no", "yes"])
        return response


class ListProjectsTest(unittest.TestCase):
    """projects.proto: ListProjects answers a page at a time (next_page_token)."""

    def test_every_page_is_listed_in_order(self):
        client = verity_client.Client("localhost:1", timeout=10)
        self.addCleanup(client.close)
        client._projects = stub = PagedProjectsStub()
        self.assertEqual([p.name for p in client.list_projects()], ["a", "b", "c", "d"])
        self.assertEqual(stub.tokens, ["", "1", "2"])



class TimeoutTest(unittest.TestCase):
    """Client's timeout is the deadline of every RPC in seconds: a positive number."""

    def test_zero_or_negative_timeout_is_refused(self):
        for timeout in (0, -1, -0.5):
            with self.assertRaisesRegex(ValueError, "timeout must be a positive number"):
                verity_client.Client("localhost:1", timeout=timeout)
        client = verity_client.Client("localhost:1", timeout=0.5)
        self.addCleanup(client.close)
        self.assertEqual(client.timeout, 0.5)

class ApiKeyTest(unittest.TestCase):

    def client(self, **kwargs):
        client = verity_client.Client("localhost:1", timeout=10, **kwargs)
        self.addCleanup(client.close)
        return client

    def test_key_goes_with_every_stream_of_submit(self):
        client = self.client(api_key="vk_given")
        unavailable = lambda batch: ingest_pb2.BatchAck(batch_id=batch.batch_id,
                                                       error_code=UNAVAILABLE)
        client._ingest = stub = FakeIngestStub(unavailable, ok)
        with mock.patch("verity_client.client.time.sleep"):
            self.assertEqual(client.submit("p", frame(2)).retries, 1)
        self.assertEqual(stub.metadata, [(("authorization", "Bearer vk_given"),)] * 2)

    def test_key_goes_with_unary_calls(self):
        client = self.client(api_key="vk_given")
        client._keys = stub = FakeUnaryStub(keys_pb2.ListKeysResponse)
        self.assertEqual(client.list_keys(), [])
        self.assertEqual(stub.metadata, [(("authorization", "Bearer vk_given"),)])

    def test_default_is_the_environment_variable_and_empty_sends_none(self):
        with mock.patch.dict(os.environ, {"VERITY_API_KEY": "vk_from_env\n"}):
            from_env = self.client()
            explicit = self.client(api_key="vk_given")
            none = self.client(api_key="")
        with mock.patch.dict(os.environ, clear=True):
            unset = self.client()
        sent = {}
        for name, client in (("env", from_env), ("explicit", explicit), ("none", none),
                             ("unset", unset)):
            client._projects = stub = FakeUnaryStub(projects_pb2.ListProjectsResponse)
            client.list_projects()
            sent[name] = stub.metadata[0]
        self.assertEqual(sent, {"env": (("authorization", "Bearer vk_from_env"),),
                                "explicit": (("authorization", "Bearer vk_given"),),
                                "none": (), "unset": ()})

    def test_key_calls_check_their_arguments_before_sending(self):
        client = self.client(api_key="vk_given")
        client._keys = stub = FakeUnaryStub(keys_pb2.CreateKeyResponse)
        with self.assertRaisesRegex(ValueError, "unknown role 'owner'"):
            client.create_key("owner")
        with self.assertRaisesRegex(ValueError, "projects: give project names"):
            client.create_key("reader", projects=[])
        with self.assertRaisesRegex(ValueError, "not the key itself"):
            client.revoke_key("vk_0123456789abcdef_" + "e" * 64)
        self.assertEqual(stub.metadata, [])


if __name__ == "__main__":
    junit.main()
