# Multi-stage build: a static binary on distroless, running as non-root.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/seckill-proxy /out/seckill-bench /usr/local/bin/
COPY examples/seckill.yaml /etc/seckill/seckill.yaml
USER nonroot:nonroot
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/seckill-proxy"]
CMD ["serve", "-c", "/etc/seckill/seckill.yaml"]
