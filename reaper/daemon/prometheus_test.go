package daemon_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
	"golang.org/x/crypto/bcrypt"
)

// A real Prometheus server (Debian's prometheus package, installed by
// `make test`'s set-up) scrapes the synthetic workload's exporter every
// second, behind TLS and basic auth as a production server would be, and
// the reaper's autoscaler reads the role's value through its HTTP API.

// promServer is a Prometheus server the test started.
type promServer struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
	// client speaks its TLS and basic auth.
	client *http.Client
}

// stop kills the server (as a crash would) and waits for it.
func (p *promServer) stop() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startPrometheus runs prometheus scraping target (host:port) every
// second, serving HTTPS with basic auth (user "reaper", password in
// passwordFile) on a free loopback port; caFile verifies its certificate.
func startPrometheus(t *testing.T, target string) (p *promServer, caFile, passwordFile string) {
	t.Helper()
	return startPrometheusWith(t, fmt.Sprintf(`scrape_configs:
  - job_name: workload
    static_configs:
      - targets: [%q]
`, target))
}

// startPrometheusWith is startPrometheus with config's scrape_configs
// (and rule_files), scraping and evaluating rules every second.
func startPrometheusWith(t *testing.T, config string) (p *promServer, caFile, passwordFile string) {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prometheus not installed (scripts/install-test-deps.sh installs Debian's package): %v", err)
		}
		t.Skipf("prometheus not installed: run scripts/install-test-deps.sh")
	}
	dir := t.TempDir()
	caFile, certFile, keyFile := writeSelfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret-for-prometheus"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	passwordFile = filepath.Join(dir, "password")
	write(t, passwordFile, "s3cret-for-prometheus\n")
	write(t, filepath.Join(dir, "web.yml"), fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  reaper: %s\n", certFile, keyFile, hash))
	write(t, filepath.Join(dir, "prometheus.yml"), "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"+config)
	addr := freeAddr(t)
	p = &promServer{url: "https://" + addr, log: filepath.Join(dir, "prometheus.log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--web.config.file="+filepath.Join(dir, "web.yml"),
		"--web.listen-address="+addr, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(p.stop)
	// Ready when it answers a query (its TLS and auth included).
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(pem)
	p.client = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(pool)}, Timeout: 2 * time.Second}
	testutil.Eventually(t, 30*time.Second, "prometheus to answer", func() bool {
		_, err := p.get("/-/ready")
		return err == nil
	}, func() string { b, _ := os.ReadFile(p.log); return string(b) })
	return p, caFile, passwordFile
}

// get reads path from the server's API, as user "reaper".
func (p *promServer) get(path string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, p.url+path, nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth("reaper", "s3cret-for-prometheus")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return body, err
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freeAddr is a free 127.0.0.1 port.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeSelfSigned writes a CA and a server certificate for 127.0.0.1.
func writeSelfSigned(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	caCert, _ := x509.ParseCertificate(caDER)
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	write(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	write(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return caFile, certFile, keyFile
}

// The autoscaler on a Prometheus query: a rise of the load scales the role
// out, a fall scales it in through the drain handshake taking the least
// loaded server (from the host query); a wrong password, a value that
// cannot be a load (above plausible_max, negative) and a Prometheus that
// is gone hold the role, and the password never shows.
func TestAutoscaleOnPrometheus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	load := simcloud.NewWorkload(2 * 0.6)
	exporter := httptest.NewServer(load)
	defer exporter.Close()
	prom, caFile, passwordFile := startPrometheus(t, strings.TrimPrefix(exporter.URL, "http://"))

	// The serving nodes' shares, refreshed as nodes come and go (the
	// exporter serves the last spread; Prometheus scrapes it each second).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if serving, err := simcloud.ServingNodes(ctx, f.c, "web"); err == nil {
				load.Spread(serving)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	badPassword := filepath.Join(t.TempDir(), "wrong")
	write(t, badPassword, "not-the-password\n")
	f.cfg = fastConfig(t, "")
	f.cfg.Roles[0].Desired = 2
	f.cfg.Roles[0].DrainTimeout = reaper.Duration(20 * time.Second)
	f.cfg.Roles[0].Autoscale = promPolicy(t, prom.url, caFile, badPassword)
	f.seed(2)
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 10*time.Second, "reaper to lead", r.Leading)
	st, err := store.New(f.c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	decision := func() reaperkv.ScaleDecision {
		rep, err := st.ReaperReport(context.Background())
		if err != nil || rep == nil || len(rep.Roles) == 0 || rep.Roles[0].Autoscale == nil || rep.Roles[0].Autoscale.Last == nil {
			return reaperkv.ScaleDecision{}
		}
		return *rep.Roles[0].Autoscale.Last
	}
	// A wrong password: Prometheus answers 401, the role holds, and the
	// password is nowhere in the report.
	testutil.Eventually(t, 10*time.Second, "a hold on the refused query", func() bool {
		d := decision()
		return d.Result == reaperkv.ResultHold && strings.Contains(d.Reason, "401")
	})
	if rep, _ := st.ReaperReport(context.Background()); rep != nil {
		data, _ := json.Marshal(rep)
		if strings.Contains(string(data), "s3cret") || strings.Contains(string(data), "not-the-password") {
			t.Fatal("a password is in the reaper's report")
		}
	}
	r.stop()

	// The right password: at 0.6 per node the role holds at 2.
	f.cfg.Roles[0].Autoscale = promPolicy(t, prom.url, caFile, passwordFile)
	f.start(nil) // runs until the test ends
	testutil.Eventually(t, 15*time.Second, "a reading within the tolerance", func() bool {
		d := decision()
		return d.Value != nil && strings.HasPrefix(d.Reason, "within-tolerance")
	})

	// Load up to 2.4: 1.2 per node recommends 4.
	load.SetTotal(2.4)
	testutil.Eventually(t, 30*time.Second, "4 servers serving", func() bool {
		n, _, _ := st.Desired(context.Background(), "web")
		s, _ := simcloud.ServingNodes(context.Background(), f.c, "web")
		return n == 4 && len(s) == 4
	})
	// Load down to 1.2: 0.3 per node recommends 2; scale in takes the
	// least loaded (web3, a tenth of a share), through the drain handshake.
	load.SetWeight("web3", 0.1)
	load.SetTotal(1.2)
	testutil.Eventually(t, 30*time.Second, "a drain request for web3", func() bool {
		snap, err := st.Snapshot(context.Background())
		if err != nil {
			return false
		}
		if d, ok := snap.Scaling.Drains["web3"]; ok && d.Answer == nil {
			_, err := st.AnswerDrain(context.Background(), "web3", schema.DrainAnswer{Time: time.Now(), By: "test platform", Drained: true})
			return err == nil
		}
		return false
	}, func() string { d := decision(); return d.Reason })
	answered := time.Now()
	testutil.Eventually(t, 20*time.Second, "web3 deleted", func() bool { return !strings.Contains(names(f.sim.Servers()), "web3") })
	if waited := time.Since(answered); waited > 10*time.Second {
		t.Fatalf("web3 deleted %s after the answer: it waited for drain_timeout", waited)
	}
	if n := names(f.sim.Servers()); strings.Count(n, ",") != 2 {
		t.Fatalf("servers %s after the first scale in, want 3", n)
	}

	// A value that cannot be a load of the role, above plausible_max
	// (4 x 0.6) or negative: the metric is in doubt, the role holds.
	held, _, _ := st.Desired(context.Background(), "web")
	for _, c := range []struct {
		total float64
		why   string
	}{{1e300, "above plausible_max 2.4"}, {-3, ": not a load (negative or not finite)"}} {
		load.SetTotal(c.total)
		testutil.Eventually(t, 10*time.Second, "a hold on the value of "+c.why, func() bool {
			d := decision()
			return d.Result == reaperkv.ResultHold && strings.HasPrefix(d.Reason, "metric: the Prometheus query returned") && strings.Contains(d.Reason, c.why)
		}, func() string { return decision().Reason })
		time.Sleep(2 * time.Second) // past the scale-in window and cooldown
		if n, _, _ := st.Desired(context.Background(), "web"); n != held {
			t.Fatalf("desired moved from %d to %d on a Prometheus value of %g", held, n, c.total)
		}
	}

	// Prometheus gone: the role holds, whatever the load.
	prom.stop()
	load.SetTotal(10)
	testutil.Eventually(t, 10*time.Second, "a hold on the lost Prometheus", func() bool {
		d := decision()
		return d.Result == reaperkv.ResultHold && strings.Contains(d.Reason, "metric: prometheus query")
	})
	before, _, _ := st.Desired(context.Background(), "web")
	time.Sleep(2 * time.Second)
	if after, _, _ := st.Desired(context.Background(), "web"); after != before {
		t.Fatalf("desired moved from %d to %d with Prometheus gone", before, after)
	}
}

// promPolicy is role web's policy on the workload's Prometheus: target 0.6
// per node, 2 to 6 servers, cooldowns and window short for real time.
func promPolicy(t *testing.T, url, caFile, passwordFile string) *reaper.Autoscale {
	t.Helper()
	text := fmt.Sprintf(`
roles:
  - name: web
    boot: {flavor: m1, image: debian}
    autoscale:
      target: 0.6
      min: 2
      max: 6
      scale_out: {cooldown: 2s}
      scale_in: {cooldown: 2s, stabilization: 3s}
      metric:
        source: prometheus
        prometheus:
          url: %s
          query: avg(orchestrate_sim_load{role="web"})
          host_query: orchestrate_sim_load{role="web"}
          timeout: 2s
          tls_config: {ca_file: %s}
          basic_auth: {username: reaper, password_file: %s}
`, url, caFile, passwordFile)
	c, err := reaper.ParseConfig(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.CheckConfig(c); err != nil {
		t.Fatal(err)
	}
	return c.Roles[0].Autoscale
}

func tlsConfig(pool *x509.CertPool) *tls.Config { return &tls.Config{RootCAs: pool} }
