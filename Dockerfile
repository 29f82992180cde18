# syntax=docker/dockerfile:1
# Two images from one build: the gateway (the default, last stage) and the
# fenced demo store (--target fencedkv). Each is a static binary plus the
# health probe on distroless/static: no shell, no package manager, about
# 2 MB besides the binaries, running as the unprivileged user nonroot
# (65532).

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/lockgate ./cmd/lockgate \
 && go build -trimpath -ldflags="-s -w" -o /out/fencedkv ./cmd/fencedkv \
 && go build -trimpath -ldflags="-s -w" -o /out/probe ./cmd/probe

FROM gcr.io/distroless/static-debian12:nonroot AS fencedkv
COPY --from=build /out/fencedkv /out/probe /
USER nonroot:nonroot
ENV FENCEDKV_ADDR=0.0.0.0:8081
EXPOSE 8081
HEALTHCHECK --interval=5s --timeout=3s --retries=12 CMD ["/probe", "http://127.0.0.1:8081/healthz"]
ENTRYPOINT ["/fencedkv"]

FROM gcr.io/distroless/static-debian12:nonroot AS lockgate
COPY --from=build /out/lockgate /out/probe /
USER nonroot:nonroot
ENV LOCKGATE_ADDR=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --retries=12 CMD ["/probe", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/lockgate"]
