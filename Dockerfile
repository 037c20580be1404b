# The image the chart runs (charts/rampart, image.repository): the one
# rampart binary on a distroless base, as the non-root user the chart's
# securityContext expects.
#   docker build -t ghcr.io/rampart-io/rampart:0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/rampart-io/rampart/internal/cli.Version=${VERSION}" -o /out/rampart ./cmd/rampart

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rampart /rampart
USER 65532:65532
ENTRYPOINT ["/rampart"]
