package nodeguard

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// The tests call the guard and the runtime with raw messages, to compare
// bytes and to send what a typed client cannot.

// frame is one gRPC message as it was on the wire.
type frame struct{ data mem.BufferSlice }

// bytes copies the frame into one slice.
func (f *frame) bytes() []byte { return f.data.Materialize() }

// rawCodec moves messages without decoding them.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, status.Errorf(codes.Internal, "cannot send a %T as a raw frame", v)
	}
	out := f.data
	f.data = nil // gRPC frees what Marshal returns
	return out, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return status.Errorf(codes.Internal, "cannot receive a raw frame into a %T", v)
	}
	data.Ref()
	f.data = data
	return nil
}

// Name is "proto": the content type a kubelet sends.
func (rawCodec) Name() string { return "proto" }

var bidi = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
