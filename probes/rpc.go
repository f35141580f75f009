package probes

// The rpc check: an oslo.messaging RPC call over AMQP 0-9-1 to one server
// of a service (topic.server), answered by the service's own RPC dispatcher.
// It replaces openstack-helm's health-probe.py, which starts a Python
// interpreter, opens a connection and leaves a reply_<uuid> queue behind on
// every run: here one connection and one reply queue live as long as the
// check, and each Check publishes one message and waits for its reply.
//
// Wire format, as oslo.messaging 14 (Debian bookworm) speaks it:
//   - the call is a JSON object {"oslo.version": "2.0", "oslo.message":
//     "<JSON text>"} (_drivers/common.py serialize_msg) published with
//     content type application/json to the topic exchange named after the
//     control exchange, routing key "topic.server" (_drivers/amqpdriver.py
//     _send, _drivers/impl_rabbit.py topic_send). Its message holds method,
//     args, namespace and version when set (rpc/client.py), _msg_id,
//     _reply_q, _timeout, _unique_id and the request context as
//     "_context_<key>" keys (_drivers/amqp.py pack_context).
//   - the server replies to _reply_q through the default exchange
//     (impl_rabbit.py direct_send; older releases published to a direct
//     exchange named after the reply queue, which this check also declares
//     and binds). A reply carries _msg_id, result, failure (a JSON text:
//     class, module, message, tb, args, kwargs: common.py
//     serialize_remote_exception) and ending; a release may send the result
//     and then a separate ending message, and a long call may be preceded
//     by heartbeats (ending false, no result) (amqpdriver.py ReplyWaiter).
//   - the dispatcher answers a method no endpoint has with a NoSuchMethod
//     failure, or UnsupportedVersion when no endpoint matches the namespace
//     and version (rpc/dispatcher.py), and logs a traceback for it unless the
//     method name ends in "_ignore_errors" (rpc/server.py).
//   - with [DEFAULT] rpc_ping_enabled = true the dispatcher adds an endpoint
//     whose oslo_rpc_server_ping returns "pong" (rpc/dispatcher.py).

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kolla-agent/kolla-agent/certs"
	"github.com/kolla-agent/kolla-agent/retry"
)

// RPCConfig configures an rpc check.
type RPCConfig struct {
	// ConfigFile is the service's own rendered oslo config (nova.conf, ...).
	// [DEFAULT] transport_url, control_exchange, rpc_ping_enabled and host
	// and the [oslo_messaging_rabbit] TLS and login options are read from
	// it, at NewRPC and again at each (re)connection, so that a reloaded
	// config is followed.
	ConfigFile string
	// Sources are more of the service's oslo config after ConfigFile, in
	// oslo.config's order (its --config-file and --config-dir arguments as
	// given): a later one's options win.
	Sources []OsloSource
	// TransportURL is used instead of the config file's transport_url.
	TransportURL string
	// Topic is the RPC topic of the service ("conductor", "scheduler").
	Topic string
	// Server is the RPC server's host (routing key topic.server). Default:
	// [DEFAULT] host from the config file, else os.Hostname().
	Server string
	// Exchange is the control exchange. Default: [DEFAULT] control_exchange
	// from the config file, else "openstack". Services set their own default
	// in code (nova: "nova"): without it in the config, set Exchange.
	Exchange string
	// Method is the method called. Default: "oslo_rpc_server_ping" when the
	// config file has [DEFAULT] rpc_ping_enabled = true, else a method no
	// server has: its NoSuchMethod (or UnsupportedVersion) failure reply
	// proves the server alive.
	Method string
	// Namespace and Version of the call's target (nova's BaseAPI ping is in
	// namespace "baseapi"); empty leaves them out, as oslo.messaging does.
	Namespace, Version string
	Logger             *slog.Logger
}

const (
	rpcPingMethod = "oslo_rpc_server_ping"
	// rpcAbsentMethod exists on no endpoint; the "_ignore_errors" suffix
	// keeps the dispatcher from logging a traceback for it at every check.
	rpcAbsentMethod        = "kolla_agent_probe_ignore_errors"
	rpcDefaultExchange     = "openstack"
	rpcDefaultTimeout      = 10 * time.Second // when Check's context has no deadline
	rpcHeartbeat           = 10 * time.Second
	rpcCloseTimeout        = 5 * time.Second
	rpcRabbitSection       = "oslo_messaging_rabbit"
	rpcReplyQueuePrefix    = "reply_kolla-agent-" // reply_: operators' policies exempt reply queues
	rpcMaxFailureTextBytes = 300
)

var errRPCClosed = errors.New("rpc check closed")

// RPC is the rpc check. Checks run one at a time; Close waits for a
// running one.
type RPC struct {
	cfg        RPCConfig
	log        *slog.Logger
	now        func() time.Time
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	newBackoff func() wait.Backoff

	done      chan struct{} // closed by Close: ends a waiting Check
	closeOnce sync.Once
	sem       chan struct{} // held by Check and Close; guards the fields below

	sess    *rpcSession // nil when not connected
	backoff wait.Backoff
	retryAt time.Time // no connection attempt before this
	lastErr error     // why the last attempt failed
	closed  bool
}

// rpcSettings is what one connection is made with, from RPCConfig and the
// config file.
type rpcSettings struct {
	url        *transportURL
	tls        *tls.Config // nil: plain TCP
	verifyHost bool
	sasl       func(h amqpHost) []amqp.Authentication
	topic      string
	server     string
	exchange   string
	method     string
	absent     bool // method is rpcAbsentMethod
	namespace  string
	version    string
}

func (s *rpcSettings) target() string { return s.topic + "." + s.server }

// rpcSession is one connection with its reply queue.
type rpcSession struct {
	settings   *rpcSettings
	broker     string // host:port
	conn       *amqp.Connection
	connClosed chan *amqp.Error
	blocked    chan amqp.Blocking
	blockedBy  string // non-empty while the broker blocks publishing
	replyQueue string
	deliveries <-chan amqp.Delivery
	pub        *amqp.Channel // nil after the broker closed it (404); reopened on use
	pubClosed  chan *amqp.Error
	returns    chan amqp.Return
}

// NewRPC validates cfg and reads its config file.
func NewRPC(cfg RPCConfig) (*RPC, error) {
	if strings.TrimSpace(cfg.Topic) == "" {
		return nil, errors.New("rpc: topic is required")
	}
	if cfg.ConfigFile == "" && len(cfg.Sources) == 0 && cfg.TransportURL == "" {
		return nil, errors.New("rpc: a config file or a transport URL is required")
	}
	r := &RPC{
		cfg:        cfg,
		log:        cfg.Logger,
		now:        time.Now,
		dial:       (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		newBackoff: retry.Restart,
		done:       make(chan struct{}),
		sem:        make(chan struct{}, 1),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.backoff = r.newBackoff()
	if _, err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// load resolves the settings of the next connection.
func (r *RPC) load() (*rpcSettings, error) {
	var conf *osloConf
	if r.cfg.ConfigFile != "" || len(r.cfg.Sources) > 0 {
		var sources []OsloSource
		if r.cfg.ConfigFile != "" {
			sources = append(sources, OsloSource{Path: r.cfg.ConfigFile})
		}
		c, err := readOsloConfs(append(sources, r.cfg.Sources...))
		if err != nil {
			return nil, fmt.Errorf("rpc: %w", err)
		}
		conf = c
	}
	get := func(section, key string) (string, bool) {
		if conf == nil {
			return "", false
		}
		return conf.get(section, key)
	}
	s := &rpcSettings{topic: r.cfg.Topic, server: r.cfg.Server, exchange: r.cfg.Exchange,
		method: r.cfg.Method, namespace: r.cfg.Namespace, version: r.cfg.Version}

	rawURL := r.cfg.TransportURL
	if rawURL == "" {
		v, ok := get("DEFAULT", "transport_url")
		if !ok || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("rpc: %s: missing", conf.where("DEFAULT", "transport_url"))
		}
		rawURL = v
	}
	u, err := parseTransportURL(strings.TrimSpace(rawURL))
	if err != nil {
		if r.cfg.TransportURL == "" {
			return nil, fmt.Errorf("rpc: %s: %w", conf.where("DEFAULT", "transport_url"), err)
		}
		return nil, fmt.Errorf("rpc: %w", err)
	}
	s.url = u

	if s.server == "" {
		if v, ok := get("DEFAULT", "host"); ok && v != "" {
			s.server = v
		} else if s.server, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("rpc: no server given and no [DEFAULT] host: %w", err)
		}
	}
	if s.exchange == "" {
		s.exchange = rpcDefaultExchange
		if v, ok := get("DEFAULT", "control_exchange"); ok && v != "" {
			s.exchange = v
		}
	}
	if s.method == "" {
		s.method, s.absent = rpcAbsentMethod, true
		if v, ok := get("DEFAULT", "rpc_ping_enabled"); ok {
			on, err := parseOsloBool(v)
			if err != nil {
				return nil, fmt.Errorf("rpc: %s: %w", conf.where("DEFAULT", "rpc_ping_enabled"), err)
			}
			if on {
				s.method, s.absent = rpcPingMethod, false
			}
		}
	}

	// AMQP short strings: the exchange name and the routing key.
	if len(s.exchange) > 255 || len(s.target()) > 255 {
		return nil, fmt.Errorf("rpc: exchange %.40q... or routing key %.40q... longer than AMQP's 255 bytes", s.exchange, s.target())
	}

	// [oslo_messaging_rabbit] options; the URL's query overrides them, as
	// oslo.messaging's ConfigOptsProxy does.
	rabbit := func(name string, deprecated ...string) (value, where string, ok bool) {
		if v, found := u.query[name]; found {
			return v, fmt.Sprintf("transport URL option %s", name), true
		}
		for _, n := range append([]string{name}, deprecated...) {
			if v, found := get(rpcRabbitSection, n); found {
				return v, conf.where(rpcRabbitSection, n), true
			}
		}
		return "", "", false
	}
	rabbitBool := func(name string, deprecated ...string) (bool, error) {
		v, where, ok := rabbit(name, deprecated...)
		if !ok {
			return false, nil
		}
		b, err := parseOsloBool(v)
		if err != nil {
			return false, fmt.Errorf("rpc: %s: %w", where, err)
		}
		return b, nil
	}
	useTLS, err := rabbitBool("ssl", "rabbit_use_ssl")
	if err != nil {
		return nil, err
	}
	if useTLS {
		ca, _, _ := rabbit("ssl_ca_file", "kombu_ssl_ca_certs")
		cert, _, _ := rabbit("ssl_cert_file", "kombu_ssl_certfile")
		key, _, _ := rabbit("ssl_key_file", "kombu_ssl_keyfile")
		verifyHost, err := rabbitBool("ssl_enforce_hostname_verification")
		if err != nil {
			return nil, err
		}
		if s.tls, err = rpcTLSConfig(ca, cert, key, verifyHost); err != nil {
			return nil, fmt.Errorf("rpc: TLS: %w", err)
		}
		s.verifyHost = verifyHost
	}
	method := "AMQPLAIN" // oslo.messaging's default rabbit_login_method
	if v, where, ok := rabbit("rabbit_login_method"); ok && v != "" {
		switch strings.ToUpper(v) {
		case "PLAIN", "AMQPLAIN", "EXTERNAL":
			method = strings.ToUpper(v)
		default:
			return nil, fmt.Errorf("rpc: %s: login method %q is not supported (PLAIN, AMQPLAIN or EXTERNAL)", where, v)
		}
	}
	s.sasl = func(h amqpHost) []amqp.Authentication {
		plain := &amqp.PlainAuth{Username: h.user, Password: h.password}
		amqplain := &amqp.AMQPlainAuth{Username: h.user, Password: h.password}
		switch method {
		case "EXTERNAL":
			return []amqp.Authentication{&amqp.ExternalAuth{}}
		case "PLAIN":
			return []amqp.Authentication{plain, amqplain}
		}
		return []amqp.Authentication{amqplain, plain}
	}
	return s, nil
}

// rpcTLSConfig follows oslo.messaging's rabbit driver: with ssl_ca_file the
// broker's chain is verified against it, else against the system roots; the
// broker's host name only with ssl_enforce_hostname_verification (the
// service would not connect otherwise either). A client certificate is
// presented when ssl_cert_file is set (its key in ssl_key_file, or in the
// same file).
func rpcTLSConfig(caFile, certFile, keyFile string, verifyHost bool) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := certs.Pool(caFile)
		if err != nil {
			return nil, fmt.Errorf("ssl_ca_file: %w", err)
		}
		c.RootCAs = pool
	}
	if certFile != "" {
		if keyFile == "" {
			keyFile = certFile
		}
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("ssl_cert_file/ssl_key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if !verifyHost {
		roots := c.RootCAs
		c.InsecureSkipVerify = true // the chain is verified below, the name is not
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("broker sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return c, nil
}

// Check publishes one call and waits for its reply until ctx ends.
func (r *RPC) Check(ctx context.Context) (string, error) {
	select {
	case r.sem <- struct{}{}:
	case <-r.done:
		return "", errRPCClosed
	case <-ctx.Done():
		return "", errors.New("rpc: the previous check is still running")
	}
	defer func() { <-r.sem }()
	if r.closed {
		return "", errRPCClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rpcDefaultTimeout)
		defer cancel()
	}
	// Real time for the call; r.now (a test's clock) only for the backoff.
	start := time.Now()
	deadline, _ := ctx.Deadline()
	timeout := deadline.Sub(start)
	sess, err := r.session(ctx)
	if err != nil {
		return "", err
	}
	return r.call(ctx, sess, start, timeout)
}

// session returns the live session, connecting when there is none and the
// backoff allows it.
func (r *RPC) session(ctx context.Context) (*rpcSession, error) {
	if r.sess != nil {
		select {
		case e := <-r.sess.connClosed:
			r.log.Info("rpc: connection to broker lost", "broker", r.sess.broker, "reason", amqpErrorText(e))
			r.dropSession()
		default:
			if !r.sess.conn.IsClosed() {
				return r.sess, nil
			}
			r.dropSession()
		}
	}
	if now := r.now(); now.Before(r.retryAt) {
		return nil, fmt.Errorf("%w (next connection attempt in %s)", r.lastErr, fmtDuration(r.retryAt.Sub(now)))
	}
	sess, err := r.connect(ctx)
	if err != nil {
		r.lastErr = err
		r.retryAt = r.now().Add(r.backoff.Step())
		return nil, err
	}
	r.backoff = r.newBackoff()
	r.retryAt, r.lastErr = time.Time{}, nil
	r.sess = sess
	r.log.Info("rpc: connected to broker", "broker", sess.broker, "replyQueue", sess.replyQueue, "target", sess.settings.target(), "exchange", sess.settings.exchange)
	return sess, nil
}

// connect tries the transport URL's hosts in order.
func (r *RPC) connect(ctx context.Context) (*rpcSession, error) {
	s, err := r.load()
	if err != nil {
		return nil, err
	}
	var errs []string
	for i, h := range s.url.hosts {
		hctx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok && i < len(s.url.hosts)-1 {
			// an unreachable host gets its share of the time, not all of it
			share := time.Until(deadline) / time.Duration(len(s.url.hosts)-i)
			hctx, cancel = context.WithTimeout(ctx, share)
		}
		sess, err := r.connectHost(hctx, s, h)
		cancel()
		if err == nil {
			return sess, nil
		}
		r.log.Debug("rpc: connection attempt failed", "broker", h.addr(), "err", err)
		errs = append(errs, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.New(strings.Join(errs, "; "))
}

func (r *RPC) connectHost(ctx context.Context, s *rpcSettings, h amqpHost) (*rpcSession, error) {
	addr := h.addr()
	raw, err := r.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, describeDialError(addr, h, err)
	}
	conn := raw
	// Every step below is bounded by ctx: the handshakes by the socket's
	// deadline (amqp.Open clears it once the connection is open), the
	// declarations by closing the socket when ctx ends.
	if deadline, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(deadline)
	}
	if s.tls != nil {
		c := s.tls.Clone()
		c.ServerName = h.host
		tc := tls.Client(raw, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("broker %s: TLS handshake: %v", addr, err)
		}
		conn = tc
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("kolla-agent rpc check " + s.target())
	c, err := amqp.Open(conn, amqp.Config{
		SASL:       s.sasl(h),
		Vhost:      s.url.vhost,
		Heartbeat:  rpcHeartbeat,
		FrameSize:  131072,
		Properties: props,
		Locale:     "en_US",
	})
	if err != nil {
		conn.Close()
		return nil, describeDialError(addr, h, err)
	}
	stopped := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(stopped)
		raw.Close()
	})
	sess, err := r.setup(c, s, addr)
	if !stop() {
		<-stopped
		if err == nil {
			c.Close()
			err = ctx.Err()
		}
		return nil, fmt.Errorf("broker %s: setting up the reply queue: %v", addr, err)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("broker %s: setting up the reply queue: %v", addr, amqpErrorText(err))
	}
	return sess, nil
}

// setup declares the reply queue, once per connection: exclusive and
// auto-delete, so that it goes with the connection. The direct exchange of
// the same name, bound to it, is the reply path of oslo.messaging releases
// that publish replies there rather than through the default exchange.
func (r *RPC) setup(c *amqp.Connection, s *rpcSettings, addr string) (*rpcSession, error) {
	sess := &rpcSession{
		settings:   s,
		broker:     addr,
		conn:       c,
		connClosed: c.NotifyClose(make(chan *amqp.Error, 1)),
		blocked:    c.NotifyBlocked(make(chan amqp.Blocking, 4)),
		replyQueue: rpcReplyQueuePrefix + randomHex(12),
	}
	ch, err := c.Channel()
	if err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(sess.replyQueue, false, true, true, false, nil); err != nil {
		return nil, err
	}
	if err := ch.ExchangeDeclare(sess.replyQueue, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		return nil, err
	}
	if err := ch.QueueBind(sess.replyQueue, sess.replyQueue, sess.replyQueue, false, nil); err != nil {
		return nil, err
	}
	if sess.deliveries, err = ch.Consume(sess.replyQueue, "", true, true, false, false, nil); err != nil {
		return nil, err
	}
	if err := sess.openPublisher(); err != nil {
		return nil, err
	}
	return sess, nil
}

// openPublisher opens the channel calls are published on. It is not the
// consumer's: the broker closes a channel that publishes to a missing
// exchange, and the reply queue must outlive that.
func (sess *rpcSession) openPublisher() error {
	ch, err := sess.conn.Channel()
	if err != nil {
		return err
	}
	sess.pub = ch
	sess.pubClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
	sess.returns = ch.NotifyReturn(make(chan amqp.Return, 4))
	return nil
}

func (r *RPC) dropSession() {
	if r.sess == nil {
		return
	}
	if !r.sess.conn.IsClosed() {
		_ = r.sess.conn.CloseDeadline(r.now().Add(rpcCloseTimeout))
	}
	r.sess = nil
}

// rpcCall is the message of a call (the "oslo.message" of the envelope).
type rpcCall struct {
	Method    string         `json:"method"`
	Args      map[string]any `json:"args"`
	Namespace string         `json:"namespace,omitempty"`
	Version   string         `json:"version,omitempty"`
	MsgID     string         `json:"_msg_id"`
	ReplyQ    string         `json:"_reply_q"`
	Timeout   *float64       `json:"_timeout"` // call-monitor timeout: none
	UniqueID  string         `json:"_unique_id"`
	RequestID string         `json:"_context_request_id"`
}

type rpcEnvelope struct {
	Version string `json:"oslo.version"`
	Message string `json:"oslo.message"`
}

// rpcReply is one reply message; Failure is a JSON text.
type rpcReply struct {
	MsgID   string          `json:"_msg_id"`
	Result  json.RawMessage `json:"result"`
	Failure json.RawMessage `json:"failure"`
	Ending  *bool           `json:"ending"`
}

// rpcFailure is a serialised remote exception.
type rpcFailure struct {
	Class   string `json:"class"`
	Module  string `json:"module"`
	Message string `json:"message"`
}

func (r *RPC) call(ctx context.Context, sess *rpcSession, start time.Time, timeout time.Duration) (string, error) {
	s := sess.settings
	if err := r.drain(sess); err != nil {
		return "", err
	}
	if sess.pub == nil {
		if err := sess.openPublisher(); err != nil {
			r.dropSession()
			return "", fmt.Errorf("broker %s: opening a channel: %v", sess.broker, amqpErrorText(err))
		}
	}
	msgID := randomHex(16)
	body, err := encodeRPCCall(s, msgID, sess.replyQueue)
	if err != nil {
		return "", fmt.Errorf("rpc: encoding the call: %w", err)
	}
	// The message expires with the check: a stopped or hung server's queue
	// does not pile up calls that nobody waits for any more.
	ttl := max(timeout.Milliseconds(), 1)
	err = sess.pub.PublishWithContext(ctx, s.exchange, s.target(), true, false, amqp.Publishing{
		ContentType:     "application/json",
		ContentEncoding: "utf-8",
		DeliveryMode:    amqp.Transient,
		CorrelationId:   msgID,
		Expiration:      strconv.FormatInt(ttl, 10),
		Body:            body,
	})
	if err != nil {
		if errors.Is(err, amqp.ErrClosed) {
			sess.pub = nil // closed under us: reopened by the next check
		}
		return "", fmt.Errorf("broker %s: publishing to exchange %s: %v", sess.broker, s.exchange, amqpErrorText(err))
	}
	for {
		select {
		case d, ok := <-sess.deliveries:
			if !ok {
				return "", r.lost(sess, "while waiting for the reply")
			}
			rep, err := decodeRPCReply(d.Body)
			if err != nil {
				r.log.Debug("rpc: undecodable message on the reply queue", "err", err)
				continue
			}
			if rep.MsgID != msgID {
				r.log.Debug("rpc: discarding a stale reply", "msgID", rep.MsgID)
				continue
			}
			if isNull(rep.Result) && isNull(rep.Failure) && rep.Ending != nil && !*rep.Ending {
				continue // call-monitor heartbeat, or a result of None before its ending message
			}
			return r.verdict(s, rep, time.Since(start))
		case ret, ok := <-sess.returns:
			if !ok {
				sess.returns = nil
				continue
			}
			if ret.CorrelationId != msgID {
				continue
			}
			return "", fmt.Errorf("nothing consumes %s on exchange %s (%s): is the RPC server running, with host %q?",
				s.target(), s.exchange, ret.ReplyText, s.server)
		case e, ok := <-sess.pubClosed:
			sess.pub, sess.pubClosed, sess.returns = nil, nil, nil
			if ok && e != nil && e.Code == amqp.NotFound {
				return "", fmt.Errorf("exchange %s not found: no RPC server has declared it (is the control exchange right?)", s.exchange)
			}
			if !ok {
				return "", r.lost(sess, "while waiting for the reply")
			}
			return "", fmt.Errorf("broker %s closed the channel: %s", sess.broker, amqpErrorText(e))
		case b, ok := <-sess.blocked:
			sess.noteBlocked(b, ok)
		case <-ctx.Done():
			reason := fmt.Sprintf("no reply from %s on exchange %s within %s", s.target(), s.exchange, fmtDuration(timeout))
			if sess.blockedBy != "" {
				reason += fmt.Sprintf(" (the broker blocks publishing: %s)", sess.blockedBy)
			}
			return "", errors.New(reason)
		case <-r.done:
			return "", errRPCClosed
		}
	}
}

// noteBlocked records a connection.blocked/unblocked notice (ok false: the
// notices ended with the connection).
func (sess *rpcSession) noteBlocked(b amqp.Blocking, ok bool) {
	if !ok {
		sess.blocked = nil
		return
	}
	sess.blockedBy = ""
	if b.Active {
		sess.blockedBy = b.Reason
	}
}

// drain discards what arrived after earlier checks ended: stale replies,
// returns, blocking notices. A closed delivery channel means a lost
// connection.
func (r *RPC) drain(sess *rpcSession) error {
	for {
		select {
		case _, ok := <-sess.deliveries:
			if !ok {
				return r.lost(sess, "")
			}
		case _, ok := <-sess.returns:
			if !ok {
				sess.returns = nil
			}
		case b, ok := <-sess.blocked:
			sess.noteBlocked(b, ok)
		default:
			return nil
		}
	}
}

// lost drops a session whose reply consumer ended and says why: the
// connection closed, or the broker cancelled the consumer (the reply queue
// was deleted).
func (r *RPC) lost(sess *rpcSession, when string) error {
	if when != "" {
		when = " " + when
	}
	if !sess.conn.IsClosed() {
		r.dropSession()
		return fmt.Errorf("broker %s cancelled the reply queue's consumer%s (queue %s deleted?)", sess.broker, when, sess.replyQueue)
	}
	reason := "closed"
	select {
	case e, ok := <-sess.connClosed:
		if ok && e != nil {
			reason = amqpErrorText(e)
		}
	default:
	}
	r.dropSession()
	return fmt.Errorf("connection to broker %s lost%s: %s", sess.broker, when, reason)
}

func (r *RPC) verdict(s *rpcSettings, rep *rpcReply, elapsed time.Duration) (string, error) {
	if !isNull(rep.Failure) {
		f := decodeRPCFailure(rep.Failure)
		if s.absent && (f.Class == "NoSuchMethod" || f.Class == "UnsupportedVersion") {
			return fmt.Sprintf("%s answered in %s (%s: its dispatcher is alive)", s.target(), fmtDuration(elapsed), f.Class), nil
		}
		return "", fmt.Errorf("%s replied with an error to %s: %s: %s", s.target(), s.method, f.Class, f.Message)
	}
	if s.method == rpcPingMethod {
		var res string
		if json.Unmarshal(rep.Result, &res) == nil && res == "pong" {
			return fmt.Sprintf("pong from %s in %s", s.target(), fmtDuration(elapsed)), nil
		}
	}
	return fmt.Sprintf("reply from %s to %s in %s", s.target(), s.method, fmtDuration(elapsed)), nil
}

func encodeRPCCall(s *rpcSettings, msgID, replyQueue string) ([]byte, error) {
	msg, err := json.Marshal(rpcCall{
		Method:    s.method,
		Args:      map[string]any{},
		Namespace: s.namespace,
		Version:   s.version,
		MsgID:     msgID,
		ReplyQ:    replyQueue,
		UniqueID:  randomHex(16),
		RequestID: "req-" + randomUUID(),
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(rpcEnvelope{Version: "2.0", Message: string(msg)})
}

// decodeRPCReply accepts a 2.0 envelope or, as oslo.messaging does, a bare
// (1.0) message.
func decodeRPCReply(body []byte) (*rpcReply, error) {
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(body, &outer); err != nil {
		return nil, err
	}
	payload := body
	if raw, ok := outer["oslo.message"]; ok {
		var inner string
		if err := json.Unmarshal(raw, &inner); err != nil {
			return nil, fmt.Errorf("oslo.message: %w", err)
		}
		payload = []byte(inner)
	}
	var rep rpcReply
	if err := json.Unmarshal(payload, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// decodeRPCFailure reads a failure: a JSON text (or, leniently, an object)
// with the exception's class and message.
func decodeRPCFailure(raw json.RawMessage) rpcFailure {
	var f rpcFailure
	var text string
	if json.Unmarshal(raw, &text) == nil {
		raw = json.RawMessage(text)
	}
	if json.Unmarshal(raw, &f) != nil || f.Class == "" {
		f = rpcFailure{Class: "RemoteError", Message: string(raw)}
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(f.Message), "\n")
	if len(msg) > rpcMaxFailureTextBytes {
		msg = msg[:rpcMaxFailureTextBytes] + "..."
	}
	f.Message = msg
	return f
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// describeDialError turns a failed connection into an operator's reason.
// It names the broker and the user, never the password.
func describeDialError(addr string, h amqpHost, err error) error {
	var amqpErr *amqp.Error
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("broker %s: connection refused", addr)
	case errors.Is(err, amqp.ErrCredentials):
		return fmt.Errorf("broker %s: authentication failed for user %q", addr, h.user)
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.AccessRefused:
		return fmt.Errorf("broker %s: authentication failed for user %q (%s)", addr, h.user, amqpErr.Reason)
	case errors.Is(err, amqp.ErrVhost):
		return fmt.Errorf("broker %s: user %q may not open the vhost", addr, h.user)
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotAllowed:
		return fmt.Errorf("broker %s: vhost refused for user %q (%s)", addr, h.user, amqpErr.Reason)
	case errors.As(err, &amqpErr) && !amqpErr.Server && amqpErr.Code == amqp.FrameError:
		return fmt.Errorf("broker %s: the broker's reply is not AMQP (a TLS port? then set [oslo_messaging_rabbit] ssl = true)", addr)
	case errors.Is(err, amqp.ErrSASL):
		return fmt.Errorf("broker %s: no authentication mechanism in common with the broker", addr)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("broker %s: cannot resolve %s: %s", addr, h.host, dnsErr.Err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("broker %s: timed out connecting", addr)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("broker %s: connection attempt cancelled", addr)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return fmt.Errorf("broker %s: %v", addr, opErr.Err)
	}
	return fmt.Errorf("broker %s: %v", addr, amqpErrorText(err))
}

// amqpErrorText is an AMQP error without the library's "Exception (code)"
// prefix, or any other error's text.
func amqpErrorText(err error) string {
	var e *amqp.Error
	if errors.As(err, &e) && e != nil {
		if e.Reason != "" {
			return e.Reason
		}
		return fmt.Sprintf("AMQP error %d", e.Code)
	}
	if err == nil {
		return "closed"
	}
	return err.Error()
}

// Close closes the connection; the broker deletes the reply queue with it.
func (r *RPC) Close() error {
	r.closeOnce.Do(func() { close(r.done) })
	r.sem <- struct{}{}
	defer func() { <-r.sem }()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.sess == nil {
		return nil
	}
	err := r.sess.conn.CloseDeadline(r.now().Add(rpcCloseTimeout))
	r.sess = nil
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("rpc: closing the connection: %w", err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// randomUUID is a version 4 UUID, the form of oslo.context's request ids.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// fmtDuration rounds for people: 3ms, 412µs, 2s, 1.5s.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
