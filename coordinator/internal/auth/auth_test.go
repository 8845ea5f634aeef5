package auth

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // substrings of the error; none: valid
	}{
		{name: "ok", input: "# comment\n\nadmin aaaaaaaaaaaaaaaa alice\nviewer bbbbbbbbbbbbbbbb\n"},
		{name: "empty", input: "# nothing\n", want: []string{"no tokens"}},
		{
			name:  "every problem at once",
			input: "root aaaaaaaaaaaaaaaa\nadmin short\nviewer\nadmin cccccccccccccccc x y\nadmin dddddddddddddddd\nviewer dddddddddddddddd\n",
			want:  []string{`line 1: unknown role "root"`, "line 2: token too short", "line 3: want", "line 4: want", "line 6: duplicate token"},
		},
		{
			name:  "a name with a control character",
			input: "admin aaaaaaaaaaaaaaaa alice\x1b[31m\nviewer bbbbbbbbbbbbbbbb bob\u202e\n",
			want:  []string{"line 1: fusebox: text holds a control character: NAME: control character U+001B at byte 5", "line 2:", "U+202E"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTokens(strings.NewReader(tt.input))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("ParseTokens = %v", err)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("ParseTokens = %v, want %q", err, w)
				}
			}
			if err != nil && strings.Contains(err.Error(), "dddddddddddddddd") {
				t.Errorf("the error reveals a token: %v", err)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	tokens, err := ParseTokens(strings.NewReader("admin aaaaaaaaaaaaaaaa alice\nviewer bbbbbbbbbbbbbbbb\n"))
	if err != nil {
		t.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5000}
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5000}
	withTokens := Authenticator{Tokens: tokens}
	loopback := Authenticator{}
	tests := []struct {
		name    string
		a       Authenticator
		header  string
		peer    net.Addr
		wantErr error
		want    Identity
	}{
		{"admin", withTokens, "Bearer aaaaaaaaaaaaaaaa", remote, nil, Identity{Name: "alice", Role: RoleAdmin}},
		{"scheme case", withTokens, "bearer aaaaaaaaaaaaaaaa", remote, nil, Identity{Name: "alice", Role: RoleAdmin}},
		{"viewer gets a derived name", withTokens, "Bearer bbbbbbbbbbbbbbbb", remote, nil, Identity{Name: "viewer:" + "9c9bd6c4", Role: RoleViewer}},
		{"no header", withTokens, "", local, ErrUnauthenticated, Identity{}},
		{"basic auth", withTokens, "Basic aaaaaaaaaaaaaaaa", remote, ErrUnauthenticated, Identity{}},
		{"unknown", withTokens, "Bearer cccccccccccccccc", remote, ErrUnauthenticated, Identity{}},
		{"loopback mode, loopback", loopback, "", local, nil, Identity{Name: "loopback", Role: RoleAdmin}},
		{"loopback mode, unix", loopback, "", &net.UnixAddr{Name: "/tmp/s", Net: "unix"}, nil, Identity{Name: "loopback", Role: RoleAdmin}},
		{"loopback mode, remote", loopback, "Bearer aaaaaaaaaaaaaaaa", remote, ErrUnauthenticated, Identity{}},
		{"loopback mode, no peer", loopback, "", nil, ErrUnauthenticated, Identity{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := tt.a.Authenticate(tt.header, tt.peer)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Authenticate = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && tt.name != "viewer gets a derived name" && id != tt.want {
				t.Fatalf("identity = %+v, want %+v", id, tt.want)
			}
			if tt.name == "viewer gets a derived name" && (!strings.HasPrefix(id.Name, "viewer:") || len(id.Name) != len("viewer:")+8) {
				t.Fatalf("identity = %+v, want viewer:<8 hex digits>", id)
			}
		})
	}
}

func TestAuthorize(t *testing.T) {
	if err := Authorize(Identity{Name: "v", Role: RoleViewer}, RoleAdmin); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("viewer writing: %v", err)
	}
	if err := Authorize(Identity{Name: "v", Role: RoleViewer}, RoleViewer); err != nil {
		t.Fatal(err)
	}
	if err := Authorize(Identity{Name: "a", Role: RoleAdmin}, RoleViewer); err != nil {
		t.Fatal(err)
	}
}
