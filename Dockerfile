# render: a static binary on an empty (scratch) image, running as a non-root user.
#
#   docker build -t render --build-arg VERSION=$(git describe --tags --always) .
#
# The builder is pinned by version. The runtime is `scratch`: nothing to pin,
# nothing to patch; it holds the binary, the CA certificates render needs to
# verify TLS, and a passwd entry for the non-root user.

FROM golang:1.26.8 AS build
ENV GOTOOLCHAIN=local CGO_ENABLED=0
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/render-dev/render/internal/cli.Version=${VERSION}" \
      -o /out/render ./cmd/render

RUN echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > /out/passwd

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/passwd /etc/passwd
COPY --from=build /out/render /render
# uid/gid 65532; pods should also say runAsNonRoot: true and runAsUser: 65532
# (deploy/sidecar-pod.yaml does).
USER 65532:65532
ENTRYPOINT ["/render"]
