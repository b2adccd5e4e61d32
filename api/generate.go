// Package api holds the coordinator's gRPC contract (tandem.proto) and the Go
// code generated from it. Regenerate with `go generate ./api`; it needs protoc
// (Debian: protobuf-compiler) and the two plugins:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
package api

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative tandem.proto
