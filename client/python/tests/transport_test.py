"""Tests that verity_client.Client sends an API key in plaintext only to this machine."""

import unittest

import junit
import verity_client
from verity_client import client as client_module

KEY = "vk_0123456789abcdef_secret"


class PlaintextKeyTest(unittest.TestCase):

    def test_a_key_is_refused_off_loopback_without_tls(self):
        for target in ("192.0.2.1:50051", "example.org:443", "127.evil.example:50051",
                       "dns:///10.0.0.7:50051", "[::2]:50051"):
            with self.assertRaises(ValueError) as raised:
                verity_client.Client(target, api_key=KEY)
            message = str(raised.exception)
            self.assertIn("refusing to send the API key in plaintext", message)
            self.assertIn("ssl_channel_credentials", message)
            self.assertNotIn(KEY, message)

    def test_loopback_no_key_or_the_opt_in_are_allowed(self):
        for target in ("localhost:50051", "127.0.0.1:1", "127.8.9.10:1", "[::1]:50051",
                       "unix:/tmp/verity.sock"):
            verity_client.Client(target, api_key=KEY).close()
        verity_client.Client("192.0.2.1:50051", api_key="").close()
        verity_client.Client("192.0.2.1:50051", api_key=KEY, allow_plaintext_key=True).close()

    def test_loopback_rule(self):
        self.assertTrue(client_module._is_loopback_target("LOCALHOST:1"))
        self.assertFalse(client_module._is_loopback_target("0.0.0.0:1"))
        self.assertFalse(client_module._is_loopback_target("127.1:1"))
        self.assertFalse(client_module._is_loopback_target("localhost.evil.example:1"))


if __name__ == "__main__":
    junit.main()
