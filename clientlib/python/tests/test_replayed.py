"""An answer a server's deduplication replayed (Idempotent-Replayed: true)
is final: the requests adapter and the default classifier do not retry it
(a local dependency server, no agent)."""

import unittest
import urllib.error

import requests

import fusebox
from fusebox import _errors as E
from fusebox.requests_adapter import FuseboxAdapter

from .harness import DependencyServer
from .test_calls import FakeTime, new_client


class ReplayedTest(unittest.TestCase):
    def test_the_adapter_does_not_retry_a_replayed_answer(self):
        for name, headers, want in [("replayed", {fusebox.HEADER_REPLAYED: "true"}, 1), ("unmarked", {}, 3)]:
            with self.subTest(name):
                srv = DependencyServer(mode=lambda h, headers=headers: (503, headers, b"stored"))
                self.addCleanup(srv.close)
                ft = FakeTime()
                c = new_client(ft)
                self.addCleanup(c.close)
                s = requests.Session()
                s.mount("http://", FuseboxAdapter(c))
                self.addCleanup(s.close)
                r = s.post(srv.url + "/orders", data=b"order 7", headers={"Idempotency-Key": "order-7"}, timeout=30)
                self.assertEqual((r.status_code, r.content), (503, b"stored"))
                self.assertEqual(r.headers.get(fusebox.HEADER_REPLAYED), headers.get(fusebox.HEADER_REPLAYED))
                self.assertEqual(srv.count(), want)

    def test_the_default_classifier(self):
        c = fusebox.default_classifier(fusebox.HTTPStatusError(503, replayed=True))
        self.assertEqual((c.retryable, c.failure), (False, True))
        self.assertTrue(fusebox.default_classifier(fusebox.HTTPStatusError(503)).retryable)
        resp = requests.Response()
        resp.status_code, resp.headers[fusebox.HEADER_REPLAYED] = 503, "true"
        self.assertFalse(fusebox.default_classifier(requests.HTTPError(response=resp)).retryable)
        err = urllib.error.HTTPError("http://x", 503, "down", {fusebox.HEADER_REPLAYED: "true"}, None)
        self.assertFalse(fusebox.default_classifier(err).retryable)
        self.assertEqual(E.HEADER_REPLAYED, "Idempotent-Replayed")


if __name__ == "__main__":
    unittest.main()
