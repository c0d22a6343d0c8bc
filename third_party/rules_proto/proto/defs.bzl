"""Offline stand-in for rules_proto: re-exports Bazel 4's native proto rules."""

proto_library = native.proto_library
proto_lang_toolchain = native.proto_lang_toolchain
