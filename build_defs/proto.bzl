"""verity_cc_grpc_library: C++ protobuf + gRPC code from the system protoc and grpc_cpp_plugin.

Every proto target of the repository goes through this one macro. Sources are given relative to
the package (e.g. "verity/v1/projects.proto" in //proto); imports are resolved relative to the
package directory, so a proto imports "verity/v1/common.proto" and C++ includes
"verity/v1/common.pb.h". Debian's well-known types (google/protobuf/*.proto) come from
/usr/include.
"""

def verity_cc_grpc_library(name, srcs, deps = [], visibility = None):
    outs = []
    for src in srcs:
        stem = src[:-len(".proto")]
        outs += [stem + ".pb.h", stem + ".pb.cc", stem + ".grpc.pb.h", stem + ".grpc.pb.cc"]
    pkg = native.package_name()
    native.genrule(
        name = name + "_codegen",
        srcs = srcs + [d + "_protos" for d in deps],
        outs = outs,
        cmd = " ".join([
            "protoc",
            "--proto_path=" + (pkg or "."),
            "--proto_path=/usr/include",
            "--cpp_out=$(GENDIR)/" + pkg,
            "--grpc_out=$(GENDIR)/" + pkg,
            "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin",
        ] + ["%s/%s" % (pkg, s) if pkg else s for s in srcs]),
    )
    native.filegroup(name = name + "_protos", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["@grpc//:grpc++", "@protobuf"],
        visibility = visibility,
    )
