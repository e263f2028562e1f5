package sim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// Git's connections. gitstore reaches its server through go-git, which
// picks a transport by the URL's scheme from its protocol registry
// (client.InstallProtocol). The campaign installs its own there, for this
// test process only: each git session belongs to the writer whose context
// its first request carries, and meets that writer's faults.
//
// Over HTTP every request is an HTTP request of the writer's Link (the
// same faults as S3's and OCI's, byte for byte). Over SSH one session is
// one connection that carries one request (the advertisement and a fetch,
// or a push): the faults apply to the session's call as a whole (a cut
// fetch is its pack cut after K bytes; a lost push is one the server
// applied before the connection dropped).
//
// Both record every push the writer sent, with what the server said, for
// the checker's landing times.

var installOnce sync.Once

// installGit installs the campaign's git transports.
func installGit() {
	installOnce.Do(func() {
		h := githttp.NewClient(&http.Client{Transport: dispatch{}})
		client.InstallProtocol("http", gitProto{inner: h})
		client.InstallProtocol("ssh", gitProto{inner: gitssh.DefaultClient, ssh: true})
	})
}

// errNoWriter is a git request whose context names no writer: render
// lost the context on the way, or something else in the process uses
// git. Either way the campaign cannot place it.
var errNoWriter = errors.New("sim: a git request whose context carries no writer")

// dispatch sends go-git's HTTP requests through their writer's Link.
type dispatch struct{}

func (dispatch) RoundTrip(req *http.Request) (*http.Response, error) {
	l := linkOf(req.Context())
	if l == nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errNoWriter
	}
	return l.RoundTrip(req)
}

// Push is a git push as the server saw it.
type Push struct {
	Commands []*packp.Command
	// OK lists the refs the server reports it moved; nil when the writer
	// got no report.
	OK map[plumbing.ReferenceName]bool
}

type gitProto struct {
	inner transport.Transport
	ssh   bool
}

func (g gitProto) NewUploadPackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.UploadPackSession, error) {
	return &gitSession{g: g, ep: ep, auth: auth, upload: true}, nil
}

func (g gitProto) NewReceivePackSession(ep *transport.Endpoint, auth transport.AuthMethod) (transport.ReceivePackSession, error) {
	return &gitSession{g: g, ep: ep, auth: auth}, nil
}

// gitSession is a session opened on its first call that carries a
// context (go-git opens them with none).
type gitSession struct {
	g      gitProto
	ep     *transport.Endpoint
	auth   transport.AuthMethod
	upload bool
	l      *Link
	up     transport.UploadPackSession
	rp     transport.ReceivePackSession
	closed bool
}

func (s *gitSession) session() transport.Session {
	if s.up != nil {
		return s.up
	}
	if s.rp != nil {
		return s.rp
	}
	return nil
}

// writer finds the session's writer, from the first call's context.
func (s *gitSession) writer(ctx context.Context) error {
	if s.l == nil {
		if s.l = linkOf(ctx); s.l == nil {
			return errNoWriter
		}
	}
	return nil
}

// open connects the session.
func (s *gitSession) open() error {
	if s.session() != nil {
		return nil
	}
	if s.closed {
		return errReset
	}
	// On an error go-git may return a nil session inside the interface:
	// keep only one that opened.
	if s.upload {
		up, err := s.g.inner.NewUploadPackSession(s.ep, s.auth)
		if err != nil {
			return err
		}
		s.up = up
		return nil
	}
	rp, err := s.g.inner.NewReceivePackSession(s.ep, s.auth)
	if err != nil {
		return err
	}
	s.rp = rp
	return nil
}

// drop closes the connection, as a reset does.
func (s *gitSession) drop() {
	if ss := s.session(); ss != nil {
		ss.Close()
	}
	s.up, s.rp, s.closed = nil, nil, true
}

// call runs one call of the session. Over HTTP the call's requests meet
// their faults in the Link; over SSH the call is one request of the
// writer, and meets its fault here.
func (s *gitSession) call(ctx context.Context, what string, do func() error) error {
	if err := s.writer(ctx); err != nil {
		return err
	}
	if !s.g.ssh {
		if err := s.open(); err != nil {
			return err
		}
		return do()
	}
	r, err := s.l.begin("git " + what)
	defer s.l.end(r)
	if err == nil && r.Fault.Kind == Cut && what != "upload-pack" {
		// Only a fetch's pack can be cut short here: the others lose
		// their answer.
		r.Fault.Kind, r.Fault.Bytes = Lost, 0
	}
	if err == nil {
		err = s.l.before(ctx, r)
	}
	if err != nil {
		if r != nil {
			r.finish(err)
		}
		s.drop()
		return err
	}
	end := s.l.part.Begin()
	t0 := time.Now()
	err = s.open()
	if err == nil {
		err = do()
	}
	r.Real = time.Since(t0)
	end()
	r.Sent = true
	if err != nil {
		r.finish(err)
		return err
	}
	if err := s.l.after(ctx, r); err != nil {
		r.finish(err)
		s.drop()
		return err
	}
	r.Delivered = true
	if r.Fault.Kind != Cut {
		r.Answered = true
	}
	return nil
}

func (s *gitSession) AdvertisedReferences() (*packp.AdvRefs, error) {
	return s.AdvertisedReferencesContext(context.Background())
}

func (s *gitSession) AdvertisedReferencesContext(ctx context.Context) (*packp.AdvRefs, error) {
	var adv *packp.AdvRefs
	err := s.call(ctx, "advertisement", func() (err error) {
		adv, err = s.session().AdvertisedReferencesContext(ctx)
		return err
	})
	return adv, err
}

func (s *gitSession) UploadPack(ctx context.Context, req *packp.UploadPackRequest) (*packp.UploadPackResponse, error) {
	var res *packp.UploadPackResponse
	var cut *Request
	err := s.call(ctx, "upload-pack", func() (err error) {
		res, err = s.up.UploadPack(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.g.ssh {
		log := s.l.Requests()
		cut = log[len(log)-1]
	}
	// Reading the pack is waiting for the server too; a Cut ends it.
	b := &body{rc: res, part: s.l.part, r: &Request{}}
	if cut != nil {
		b.r = cut
		b.cut, b.left = cut.Fault.Kind == Cut, cut.Fault.Bytes
	}
	out := packp.NewUploadPackResponseWithPackfile(req, b)
	out.ShallowUpdate, out.ServerResponse = res.ShallowUpdate, res.ServerResponse
	return out, nil
}

func (s *gitSession) ReceivePack(ctx context.Context, req *packp.ReferenceUpdateRequest) (*packp.ReportStatus, error) {
	var rs *packp.ReportStatus
	push := &Push{Commands: req.Commands}
	err := s.call(ctx, "receive-pack", func() (err error) {
		rs, err = s.rp.ReceivePack(ctx, req)
		if rs != nil {
			push.OK = map[plumbing.ReferenceName]bool{}
			for _, st := range rs.CommandStatuses {
				if st.Error() == nil && rs.UnpackStatus == "ok" {
					push.OK[st.ReferenceName] = true
				}
			}
		}
		return err
	})
	s.l.notePush(push)
	// go-git returns the report with the error that a refused command
	// makes of it: both, as it does.
	return rs, err
}

func (s *gitSession) Close() error {
	if ss := s.session(); ss != nil {
		return ss.Close()
	}
	return nil
}

var _ io.Closer = (*gitSession)(nil)

// notePush logs a push on the writer's last push request.
func (l *Link) notePush(p *Push) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.log) - 1; i >= 0; i-- {
		if strings.Contains(l.log[i].What, "receive-pack") && l.log[i].Push == nil {
			l.log[i].Push = p
			return
		}
	}
}
