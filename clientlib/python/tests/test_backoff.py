import statistics
import random
import unittest

from fusebox import _backoff as B


class CeilingTest(unittest.TestCase):
    def test_table(self):
        for base, cap, n, want in [
            (0.1, 5, 0, 0.1), (0.1, 5, 1, 0.2), (0.1, 5, 5, 3.2), (0.1, 5, 6, 5), (0.1, 5, 1000, 5),
            (0, 1, 3, 0), (0.1, 5, -3, 0.1),
        ]:
            with self.subTest(base=base, cap=cap, n=n):
                self.assertAlmostEqual(B.ceiling(base, cap, n), want)

    def test_no_cap_does_not_overflow(self):
        v = B.ceiling(3600, 0, 5000)
        self.assertGreater(v, 0)
        self.assertNotEqual(v, float("inf"))


class WaitTest(unittest.TestCase):
    def test_full_jitter_is_uniform_below_the_ceiling(self):
        rnd = random.Random(1)
        for n in range(4):
            c = B.ceiling(0.1, 5, n)
            xs = [B.wait(0.1, 5, B.FULL, n, 0, rnd.random()) for _ in range(5000)]
            self.assertTrue(all(0 <= x < c for x in xs), "a full-jitter wait outside [0, ceiling)")
            q = statistics.quantiles(xs, n=4)
            for got, want in zip(q, (c / 4, c / 2, 3 * c / 4)):
                self.assertAlmostEqual(got, want, delta=c * 0.05)

    def test_equal_none_decorrelated(self):
        self.assertAlmostEqual(B.wait(0.1, 5, B.EQUAL, 2, 0, 0), 0.2)
        self.assertLess(B.wait(0.1, 5, B.EQUAL, 2, 0, 0.9999), 0.4)
        self.assertAlmostEqual(B.wait(0.1, 5, B.NONE, 3, 0, 0.5), 0.8)
        self.assertAlmostEqual(B.wait(0.1, 5, B.DECORRELATED, 0, 0, 0.5), 0.1)
        self.assertAlmostEqual(B.wait(0.1, 5, B.DECORRELATED, 1, 1.0, 0.5), 0.1 + 0.5 * 2.9)
        self.assertEqual(B.wait(0.1, 5, B.DECORRELATED, 1, 100, 0.9), 5)

    def test_bad_draw_is_zero(self):
        self.assertEqual(B.wait(0.1, 5, B.FULL, 0, 0, 1.0), 0)
        self.assertEqual(B.wait(0.1, 5, B.FULL, 0, 0, -1), 0)
