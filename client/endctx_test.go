package client

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-tx/tandem/api"
)

// endAfterAnswers returns dial options (plaintext) that call cancel, the
// cancel of the caller's context, once the nth Commit call has its answer,
// in the SDK's own goroutine before it looks at that answer: the SDK then
// finds its context ended between two calls, never during one, however slow
// the machine. (With a deadline instead, a busy machine may end it while a
// call is under way, and the outcome is then rightly unknown.)
func endAfterAnswers(n int32, cancel context.CancelFunc) []grpc.DialOption {
	var answers atomic.Int32
	answered := func(method string) {
		if method == api.Coordinator_Commit_FullMethodName && answers.Add(1) == n {
			cancel()
		}
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			answered(method)
			return err
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				answered(method)
				return nil, err
			}
			return &answeredStream{ClientStream: s, done: func() { answered(method) }}, nil
		}),
	}
}

// answeredStream is a unary call made through the stream API (the SDK's
// Commit with the early decision): its first RecvMsg is the answer.
type answeredStream struct {
	grpc.ClientStream
	once sync.Once
	done func()
}

func (s *answeredStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(s.done)
	return err
}
