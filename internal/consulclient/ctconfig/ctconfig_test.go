package ctconfig

import (
	"testing"

	"github.com/hashicorp/consul-template/config"
	"github.com/hashicorp/consul/api"
)

func TestConsul(t *testing.T) {
	tls := api.TLSConfig{Address: "consul.example", CAFile: "/ca.pem", CAPath: "/ca", CertFile: "/c.pem", KeyFile: "/k.pem"}
	for _, tc := range []struct {
		name     string
		ac       api.Config
		wantAddr string
		wantSSL  bool
	}{
		{name: "plain", ac: api.Config{Address: "127.0.0.1:8500", Scheme: "http", Token: "t"}, wantAddr: "127.0.0.1:8500"},
		{name: "https scheme", ac: api.Config{Address: "127.0.0.1:8501", Scheme: "https", TLSConfig: tls}, wantAddr: "https://127.0.0.1:8501", wantSSL: true},
		{name: "https address", ac: api.Config{Address: "https://127.0.0.1:8501", TLSConfig: tls}, wantAddr: "https://127.0.0.1:8501", wantSSL: true},
		{name: "token file", ac: api.Config{Address: "127.0.0.1:8500", TokenFile: "/token"}, wantAddr: "127.0.0.1:8500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := Consul(&tc.ac)
			cc.Finalize()
			if got := config.StringVal(cc.Address); got != tc.wantAddr {
				t.Errorf("address %q, want %q", got, tc.wantAddr)
			}
			if config.StringVal(cc.Token) != tc.ac.Token || config.StringVal(cc.TokenFile) != tc.ac.TokenFile {
				t.Errorf("token %q file %q, want %q and %q", config.StringVal(cc.Token), config.StringVal(cc.TokenFile), tc.ac.Token, tc.ac.TokenFile)
			}
			if got := config.BoolVal(cc.SSL.Enabled); got != tc.wantSSL {
				t.Fatalf("ssl %v, want %v", got, tc.wantSSL)
			}
			if !tc.wantSSL {
				return
			}
			if !config.BoolVal(cc.SSL.Verify) || config.StringVal(cc.SSL.CaCert) != tls.CAFile || config.StringVal(cc.SSL.CaPath) != tls.CAPath ||
				config.StringVal(cc.SSL.Cert) != tls.CertFile || config.StringVal(cc.SSL.Key) != tls.KeyFile || config.StringVal(cc.SSL.ServerName) != tls.Address {
				t.Errorf("ssl config %s does not carry %+v", cc.SSL.GoString(), tls)
			}
		})
	}
}
