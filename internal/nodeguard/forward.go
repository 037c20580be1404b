package nodeguard

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The forwarder passes every gRPC call from the kubelet to the runtime as
// raw frames: it is registered as the server's UnknownServiceHandler, so no
// service is registered and every method, unary or streaming, known to this
// build or added by a later CRI version, takes the same path. Only the
// methods in intercepted have their first request frame read before the
// call is opened to the runtime.
//
// Why not github.com/mwitkow/grpc-proxy (the usual transparent proxy) or a
// fork: the module proxy serves it only as an untagged pseudo-version, its
// StreamDirector sees the method but never the request (the guard must
// decide on the request before opening the call to the runtime), it
// re-encodes every frame through emptypb.Empty, and it turns a client-side
// failure into codes.Internal. What we need is the loop below and a codec
// that hands frames over untouched.

// maxMessage bounds one frame either way. The kubelet accepts 16 MiB
// answers from the runtime; the guard must never be the narrower pipe.
const maxMessage = 256 << 20

// frame is one gRPC message as it was on the wire.
type frame struct{ data mem.BufferSlice }

// bytes copies the frame into one slice, for decoding.
func (f *frame) bytes() []byte { return f.data.Materialize() }

// rawCodec moves frames without decoding them. Unmarshal keeps a reference
// to gRPC's buffers and Marshal hands it back, so a frame is never copied.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, status.Errorf(codes.Internal, "node guard: cannot send a %T as a raw frame", v)
	}
	out := f.data
	f.data = nil // gRPC frees what Marshal returns
	return out, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return status.Errorf(codes.Internal, "node guard: cannot receive a raw frame into a %T", v)
	}
	data.Ref()
	f.data = data
	return nil
}

// Name is "proto" so that the runtime sees the content type the kubelet
// sends (application/grpc+proto).
func (rawCodec) Name() string { return "proto" }

// interceptor judges the calls of the intercepted methods. intercept gets
// the first request frame. An error is answered to the client instead of
// forwarding the call; otherwise, if after is not nil, it is called once
// the call ends, with the first response frame (nil if none) and the
// call's final error (nil on success).
type interceptor interface {
	intercept(ctx context.Context, method string, req []byte) (after func(resp []byte, err error), err error)
}

type forwarder struct {
	backend     grpc.ClientConnInterface
	intercepted map[string]bool
	judge       interceptor
	observe     func(method string, d time.Duration, err error)
	// unary are the methods known to take one request and give one
	// answer: they skip the stream machinery (a goroutine and a stream
	// per call).
	unary map[string]bool
}

var bidi = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// handle is the grpc.StreamHandler for every call.
func (p *forwarder) handle(_ any, ss grpc.ServerStream) (err error) {
	start := time.Now()
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "node guard: no method in the stream")
	}
	if p.observe != nil {
		defer func() { p.observe(method, time.Since(start), err) }()
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}

	var first *frame
	var after func([]byte, error)
	var firstResp []byte
	if p.intercepted[method] {
		first = &frame{}
		if err := ss.RecvMsg(first); err != nil {
			if err == io.EOF {
				return status.Errorf(codes.InvalidArgument, "node guard: %s without a request", method)
			}
			return err
		}
		after, err = p.judge.intercept(ctx, method, first.bytes())
		if err != nil {
			first.data.Free()
			return err
		}
		if after != nil {
			defer func() { after(firstResp, err) }()
		}
	}

	if p.unary[method] {
		return p.forwardUnary(ctx, ss, method, first, &firstResp)
	}
	cs, err := p.backend.NewStream(ctx, bidi, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		if first != nil {
			first.data.Free()
		}
		return err
	}

	// Client to runtime, until the client half-closes.
	go func() {
		if first != nil {
			if cs.SendMsg(first) != nil {
				return // the runtime ended the call; RecvMsg below has its status
			}
		}
		for {
			var f frame
			if err := ss.RecvMsg(&f); err != nil {
				if err == io.EOF {
					_ = cs.CloseSend()
				} else {
					cancel() // the client is gone: end the runtime's side too
				}
				return
			}
			if cs.SendMsg(&f) != nil {
				return
			}
		}
	}()

	// Runtime to client, until the runtime ends the call.
	for i := 0; ; i++ {
		var f frame
		rerr := cs.RecvMsg(&f)
		if i == 0 && rerr == nil {
			// The runtime's headers go out before its first message.
			if md, herr := cs.Header(); herr == nil && md.Len() > 0 {
				if err := ss.SendHeader(md); err != nil {
					f.data.Free()
					return err
				}
			}
		}
		if rerr != nil {
			ss.SetTrailer(cs.Trailer())
			if rerr == io.EOF {
				return nil
			}
			return rerr // the runtime's status, code and message as they were
		}
		if i == 0 && after != nil {
			firstResp = f.bytes()
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
	}
}

// forwardUnary forwards a call of a method known to be unary. first is
// its request if already read; *resp gets the answer's bytes if the caller
// needs them (an intercepted call).
func (p *forwarder) forwardUnary(ctx context.Context, ss grpc.ServerStream, method string, first *frame, resp *[]byte) error {
	req := first
	if req == nil {
		req = &frame{}
		if err := ss.RecvMsg(req); err != nil {
			if err == io.EOF {
				return status.Errorf(codes.InvalidArgument, "node guard: %s without a request", method)
			}
			return err
		}
	}
	var header, trailer metadata.MD
	out := &frame{}
	err := p.backend.Invoke(ctx, method, req, out, grpc.ForceCodecV2(rawCodec{}), grpc.Header(&header), grpc.Trailer(&trailer))
	if header.Len() > 0 {
		if herr := ss.SendHeader(header); herr != nil {
			out.data.Free()
			return herr
		}
	}
	ss.SetTrailer(trailer)
	if err != nil {
		return err
	}
	if resp != nil && first != nil {
		*resp = out.bytes()
	}
	return ss.SendMsg(out)
}
