package fleet

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// inProcessClient is the AgentClient of an agent on the simulated network:
// it calls the local API's handlers in process (agentopt.Inside.API). The
// unary methods are the agent's own; Session, a gRPC stream, is not
// served in process.
type inProcessClient struct{ srv fuseboxv1.AgentServer }

var _ fuseboxv1.AgentClient = inProcessClient{}

func (c inProcessClient) Session(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[fuseboxv1.SessionRequest, fuseboxv1.SessionResponse], error) {
	return nil, status.Error(codes.Unimplemented, "fleet: an agent on the simulated network serves no Session (no gRPC stream in process)")
}

func (c inProcessClient) Check(ctx context.Context, in *fuseboxv1.CheckRequest, _ ...grpc.CallOption) (*fuseboxv1.Decision, error) {
	return c.srv.Check(ctx, in)
}

func (c inProcessClient) Report(ctx context.Context, in *fuseboxv1.ReportRequest, _ ...grpc.CallOption) (*fuseboxv1.ReportResponse, error) {
	return c.srv.Report(ctx, in)
}

func (c inProcessClient) AcquireRetry(ctx context.Context, in *fuseboxv1.AcquireRequest, _ ...grpc.CallOption) (*fuseboxv1.Decision, error) {
	return c.srv.AcquireRetry(ctx, in)
}

func (c inProcessClient) AcquireProbe(ctx context.Context, in *fuseboxv1.AcquireRequest, _ ...grpc.CallOption) (*fuseboxv1.Decision, error) {
	return c.srv.AcquireProbe(ctx, in)
}

// FirstAttempts is the Report request of a client that made successes
// and failures first attempts to each of deps (no rows for zero counts).
func FirstAttempts(deps []string, successes, failures uint32) *fuseboxv1.ReportRequest {
	req := &fuseboxv1.ReportRequest{}
	for _, dep := range deps {
		if successes > 0 {
			req.Outcomes = append(req.Outcomes, &fuseboxv1.OutcomeReport{Dependency: dep,
				Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_SUCCESS, Count: successes})
		}
		if failures > 0 {
			req.Outcomes = append(req.Outcomes, &fuseboxv1.OutcomeReport{Dependency: dep,
				Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_FAILURE, Count: failures})
		}
	}
	return req
}
