package idempotency

import (
	"context"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

const (
	metadataKey      = "idempotency-key"
	metadataOwner    = "fusebox-retry-owner"
	metadataPushback = "grpc-retry-pushback-ms"
)

func grpcOwner(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(metadataOwner); len(v) > 0 {
		return v[0]
	}
	return ""
}

// UnaryServerInterceptor is Middleware for gRPC unary handlers, keyed by
// the idempotency-key metadata clientlib's client interceptor sends. The
// fingerprint is the full method and the deterministically marshalled
// request. Once the handler has started, its outcome is stored, whatever
// it is: the response message, or the error's status (with details; an
// error that is not a status is stored as the server sends it, Unknown,
// or Canceled and DeadlineExceeded for context errors), Unavailable and
// the other codes a client retries included; response header metadata is
// not stored. A handler that calls NothingRan(ctx) has its key released
// instead, so a retry runs again; one that panics is stored as Internal
// (what it did is unknown) unless it called NothingRan first. Codes of
// the Deduper's own answers, none of them stored: a duplicate still
// running after the wait gets Aborted, a mismatched request
// InvalidArgument, a completed one whose response was not kept
// FailedPrecondition, a failing store (FailClosed) Unavailable; Aborted
// and Unavailable carry a grpc-retry-pushback-ms trailer. A replayed
// answer carries the header metadata idempotent-replayed: true.
func (d *Deduper) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		ks := md.Get(metadataKey)
		if len(ks) == 0 || ks[0] == "" {
			return handler(ctx, req)
		}
		if !validKey(ks[0]) {
			d.m.requests.WithLabelValues("invalid_key").Inc()
			return nil, status.Errorf(codes.InvalidArgument, "idempotency: the idempotency-key metadata must be 1–%d bytes of printable ASCII", MaxKeyLength)
		}
		msg, ok := req.(proto.Message)
		if !ok {
			return nil, status.Errorf(codes.Internal, "idempotency: cannot fingerprint a request of type %T (not a proto.Message)", req)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "idempotency: marshalling the request: %v", err)
		}
		scope := d.cfg.grpcScope(ctx)
		if len(scope) > MaxScopeLength {
			d.m.requests.WithLabelValues("invalid_key").Inc()
			return nil, status.Errorf(codes.InvalidArgument, "idempotency: the key's scope (fusebox-retry-owner) may be at most %d bytes", MaxScopeLength)
		}
		fp := fingerprint([]byte(info.FullMethod), b)
		key := scopedKey(scope, ks[0])
		v, token, rec, err := d.begin(ctx, key, fp)
		switch v {
		case replay:
			return d.replayGRPC(ctx, rec)
		case mismatch:
			d.m.requests.WithLabelValues("mismatch").Inc()
			return nil, status.Error(codes.InvalidArgument, "idempotency: this idempotency-key was used with a different request (method or message)")
		case inProgress:
			d.m.requests.WithLabelValues("in_progress").Inc()
			_ = grpc.SetTrailer(ctx, metadata.Pairs(metadataPushback, "1000"))
			return nil, status.Error(codes.Aborted, "idempotency: a request with this idempotency-key is still running; retry later")
		case unavailable:
			d.m.requests.WithLabelValues("store_unavailable").Inc()
			_ = grpc.SetTrailer(ctx, metadata.Pairs(metadataPushback, "1000"))
			return nil, status.Errorf(codes.Unavailable, "idempotency: the idempotency store is unavailable: %v", err)
		case runUnkeyed:
			d.m.requests.WithLabelValues("unkeyed").Inc()
			return handler(ctx, req)
		}
		return d.runGRPC(ctx, req, handler, key, token, fp)
	}
}

func (d *Deduper) runGRPC(ctx context.Context, req any, handler grpc.UnaryHandler, key, token, fp string) (resp any, herr error) {
	d.runReserved(ctx, key, token, fp, panicResponseGRPC, func(ctx context.Context) *Response {
		resp, herr = handler(ctx, req)
		return d.responseGRPC(resp, herr)
	})
	return resp, herr
}

// responseGRPC is the record of a handler's outcome. A response that
// cannot be marshalled (not a proto.Message, or marshalling fails) is
// recorded as completed but not kept, like one over MaxResponseBytes.
func (d *Deduper) responseGRPC(resp any, herr error) *Response {
	out := &Response{}
	if herr != nil {
		st := statusOf(herr)
		out.Status, out.Message = int(st.Code()), st.Message()
		out.Body, _ = proto.Marshal(st.Proto())
	} else if m, ok := resp.(proto.Message); ok {
		b, err := proto.Marshal(m)
		if err != nil {
			return &Response{Omitted: true}
		}
		out.MessageType = string(m.ProtoReflect().Descriptor().FullName())
		out.Body = b
	} else {
		return &Response{Omitted: true}
	}
	if out.Size = int64(len(out.Body)); out.Size > d.cfg.maxResponse {
		out.Body, out.Omitted = nil, true
	}
	return out
}

// statusOf is the status a gRPC server sends for a handler's error.
func statusOf(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// panicResponseGRPC is the record of a handler that panicked: Internal.
func panicResponseGRPC() *Response {
	st := status.New(codes.Internal, "idempotency: the handler of the request with this idempotency-key panicked after it started; "+
		"what it did is unknown, so it is not run again under this key")
	b, _ := proto.Marshal(st.Proto())
	return &Response{Status: int(codes.Internal), Message: st.Message(), Body: b, Size: int64(len(b))}
}

func (d *Deduper) replayGRPC(ctx context.Context, rec *Record) (any, error) {
	r := &rec.Response
	if r.Omitted {
		d.m.requests.WithLabelValues("not_stored").Inc()
		if r.Size == 0 {
			return nil, status.Error(codes.FailedPrecondition,
				"idempotency: the request with this idempotency-key completed, but its response could not be kept for replay")
		}
		return nil, status.Errorf(codes.FailedPrecondition,
			"idempotency: the request with this idempotency-key completed, but its %d-byte response was too large to keep for replay", r.Size)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(metadataReplayed, "true"))
	if r.Status != int(codes.OK) {
		var sp spb.Status
		if err := proto.Unmarshal(r.Body, &sp); err != nil {
			return nil, status.Errorf(codes.Internal, "idempotency: the stored status cannot be decoded: %v", err)
		}
		d.m.requests.WithLabelValues("replayed").Inc()
		return nil, status.FromProto(&sp).Err()
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(r.MessageType))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idempotency: the stored response type %q is unknown here: %v", r.MessageType, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(r.Body, m); err != nil {
		return nil, status.Error(codes.Internal, fmt.Sprintf("idempotency: the stored %s cannot be decoded: %v", r.MessageType, err))
	}
	d.m.requests.WithLabelValues("replayed").Inc()
	return m, nil
}
