# The tidegpu image: one static binary for every role (operator, gateway,
# agent, sim). Build: docker build -t tidegpu:latest .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/tidegpu ./cmd/tidegpu

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/tidegpu /tidegpu
USER 65532:65532
ENTRYPOINT ["/tidegpu"]
