# render: a static binary on distroless, running as a non-root user.
#
#   docker build -t render --build-arg VERSION=$(git describe --tags --always) .
#
# Both base images are pinned by tag. Pin them by digest too when you
# publish (`crane digest gcr.io/distroless/static-debian12:nonroot`), and let
# a bot such as Renovate keep tag and digest current.

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

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/render /render
# distroless's nonroot user is uid/gid 65532; pods should also say
# runAsNonRoot: true and runAsUser: 65532 (deploy/sidecar-pod.yaml does).
USER nonroot:nonroot
ENTRYPOINT ["/render"]
