# syntax=docker/dockerfile:1
# The one localpv image: `localpv node` (DaemonSet, runs as root: see docs/security.md) and `localpv extender`
# (Deployment, runs as the non-root user 65532 created below).
#
# Bases are build arguments so a machine without access to Docker Hub can pass locally made ones (the packaging
# test builds a Debian base with debootstrap). The defaults are exact tags; pin them by digest when publishing:
#   --build-arg BUILDER_IMAGE=docker.io/library/rust:1.95.0-slim-bookworm@sha256:<digest>
# The builder and the runtime must share a Debian release: the binary links glibc, libblkid and libudev.
ARG BUILDER_IMAGE=docker.io/library/rust:1.95.0-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:12.11-slim

FROM ${BUILDER_IMAGE} AS builder
# blkid and udev bindings: headers, pkg-config files, and libclang for bindgen.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config libblkid-dev libudev-dev libclang-dev clang \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# NB: Cargo.toml declares the bench `agent` explicitly, and cargo refuses a manifest whose declared target file is
# missing, even when building only the binary.
COPY benches ./benches
# The dev-only test harness crate is a path dev-dependency: cargo resolves it (its manifest and a library target)
# even for the binary alone, and builds nothing of it.
COPY crates/test-support/Cargo.toml ./crates/test-support/
RUN mkdir -p crates/test-support/src && touch crates/test-support/src/lib.rs
# The cache mounts keep downloaded crates and compiled dependencies between builds (BuildKit and buildah both
# honour them); the binary is copied out of the cached target dir in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin localpv \
 && install -D -m 0755 target/release/localpv /out/localpv

FROM ${RUNTIME_IMAGE} AS runtime-base
# The binary's only shared libraries beyond glibc. No util-linux tools: discovery, wiping and mount checks are
# done in-process (ioctls, /proc/self/mountinfo); a configured blockCleanerCommand must bring its own program.
# kubectl finds `kubectl localpv disks` through the kubectl-localpv link.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libblkid1 libudev1 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 65532 localpv \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin localpv \
 && ln -s localpv /usr/local/bin/kubectl-localpv
# The extender's user; the node agent's DaemonSet overrides it with runAsUser: 0.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/localpv"]
CMD ["--help"]

# Fast path for tests on this machine (`--target prebuilt`): the runtime stage with a binary built on the host
# (`cargo build --release`, same Debian release as the runtime image) as the only file of the build context.
FROM runtime-base AS prebuilt
ARG PREBUILT_BINARY=localpv
COPY ${PREBUILT_BINARY} /usr/local/bin/localpv

# The default target: the binary built in the builder stage above.
FROM runtime-base
COPY --from=builder /out/localpv /usr/local/bin/localpv
