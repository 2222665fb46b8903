package prometheus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/jiocloud/orchestrate/internal/yamlconf"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/planner"
	promconfig "github.com/prometheus/common/config"
	"gopkg.in/yaml.v3"
)

// Client evaluates a role's PromQL through Prometheus' HTTP API
// (GET /api/v1/query), with the HTTP client Prometheus' own configuration
// makes (TLS, basic auth, authorization).
type Client struct {
	src    *reaper.PrometheusSource
	base   *url.URL
	client *http.Client
}

// maxPromResponse bounds a query's answer: a role's value is one series,
// a host query one series per host; 8 MiB is tens of thousands of hosts.
const maxPromResponse = 8 << 20

// New returns the client of a role's Prometheus source.
func New(src *reaper.PrometheusSource) (*Client, error) {
	base, err := url.Parse(strings.TrimSuffix(src.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("prometheus url: %w", err)
	}
	hc, err := HTTPConfig(src)
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", base.Redacted(), err)
	}
	c, err := promconfig.NewClientFromConfig(hc, "reaper")
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", base.Redacted(), err)
	}
	return &Client{src: src, base: base, client: c}, nil
}

// sample is one series of an instant query's answer.
type sample struct {
	labels map[string]string
	value  float64
}

// Read evaluates the role's query (and host query): a value, or why
// there is none. An empty answer, more than one series, NaN or an
// infinity is no value: the role holds (so does the planner on a value
// that cannot be a load of the role: negative, above plausible_max). A
// host's value that cannot be a load is left out of the host values.
func (p *Client) Read(ctx context.Context) reaper.MetricReading {
	ctx, cancel := context.WithTimeout(ctx, p.src.Timeout.D())
	defer cancel()
	ss, err := p.query(ctx, p.src.Query)
	if err != nil {
		return reaper.MetricReading{Err: "prometheus query: " + err.Error()}
	}
	switch {
	case len(ss) == 0:
		return reaper.MetricReading{Err: "prometheus query returned no series (nothing scraped yet, or a label that matches nothing)"}
	case len(ss) > 1:
		return reaper.MetricReading{Err: fmt.Sprintf("prometheus query returned %d series; the role's value must be one (aggregate it, e.g. avg(...))", len(ss))}
	case math.IsNaN(ss[0].value) || math.IsInf(ss[0].value, 0):
		return reaper.MetricReading{Err: fmt.Sprintf("prometheus query returned %v", ss[0].value)}
	}
	rd := reaper.MetricReading{Value: ss[0].value}
	if p.src.HostQuery != "" {
		// Per host values only order scale in's victims: without them the
		// oldest goes, so an error here does not hold the role.
		hs, err := p.query(ctx, p.src.HostQuery)
		if err == nil {
			rd.PerHost = map[string]float64{}
			for _, s := range hs {
				if h := s.labels[p.src.HostLabel]; h != "" && planner.LoadLike(s.value) {
					rd.PerHost[h] = s.value
				}
			}
		}
	}
	return rd
}

// query runs one instant query and returns its series (a scalar answer is
// one series without labels).
func (p *Client) query(ctx context.Context, q string) ([]sample, error) {
	u := *p.base
	u.Path += "/api/v1/query"
	u.RawQuery = url.Values{"query": {q}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// The URL carries the query; the cause is what matters.
			return nil, fmt.Errorf("%s: %w", p.base.Redacted(), ue.Err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPromResponse+1))
	if err != nil {
		return nil, fmt.Errorf("read the answer of %s: %w", p.base.Redacted(), err)
	}
	if len(body) > maxPromResponse {
		return nil, fmt.Errorf("%s answered more than %d bytes", p.base.Redacted(), maxPromResponse)
	}
	return parsePromAnswer(resp.StatusCode, body)
}

// parsePromAnswer reads an /api/v1/query answer.
func parsePromAnswer(code int, body []byte) ([]sample, error) {
	var a struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("HTTP %d, not a Prometheus API answer: %.80q", code, body)
	}
	if a.Status != "success" {
		return nil, fmt.Errorf("HTTP %d: %s: %s", code, a.ErrorType, a.Error)
	}
	switch a.Data.ResultType {
	case "scalar":
		var pair []json.RawMessage
		if err := json.Unmarshal(a.Data.Result, &pair); err != nil {
			return nil, fmt.Errorf("scalar answer: %w", err)
		}
		v, err := promValue(pair)
		if err != nil {
			return nil, err
		}
		return []sample{{value: v}}, nil
	case "vector":
		var series []struct {
			Metric map[string]string `json:"metric"`
			Value  []json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(a.Data.Result, &series); err != nil {
			return nil, fmt.Errorf("vector answer: %w", err)
		}
		out := make([]sample, 0, len(series))
		for _, s := range series {
			v, err := promValue(s.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, sample{labels: s.Metric, value: v})
		}
		return out, nil
	}
	return nil, fmt.Errorf("the query's answer is a %s; want an instant vector or a scalar", a.Data.ResultType)
}

// promValue reads a [time, "value"] pair; the value may be NaN or ±Inf.
func promValue(pair []json.RawMessage) (float64, error) {
	var s string
	if len(pair) != 2 || json.Unmarshal(pair[1], &s) != nil {
		return 0, errors.New("a sample is not [time, \"value\"]")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q is not a number", s)
	}
	return v, nil
}

// HTTPConfig decodes the source's inline HTTP client settings as
// Prometheus' own configuration (an unknown key is an error, as it is
// anywhere in the reaper's configuration) and checks them.
func HTTPConfig(src *reaper.PrometheusSource) (promconfig.HTTPClientConfig, error) {
	var hc promconfig.HTTPClientConfig
	if len(src.HTTP) > 0 {
		data, err := yaml.Marshal(src.HTTP)
		if err != nil {
			return hc, err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&hc); err != nil {
			return hc, decodeError(err)
		}
	}
	if err := hc.Validate(); err != nil {
		return hc, err
	}
	return hc, nil
}

// wrongKind finds the value yaml names in "cannot unmarshal !!str `x`
// into T" (whose T is a Go type, never shown).
var wrongKind = regexp.MustCompile("cannot unmarshal !!\\w+ `([^`]*)` into")

// unknownField finds the key yaml names in "field X not found in type T".
var unknownField = regexp.MustCompile(`field (\S+) not found in type`)

// decodeError says what is wrong with the HTTP settings in the
// configuration's words: the line numbers and type names yaml gives are
// those of the re-encoded settings, not of the file.
func decodeError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var why []string
	for _, e := range te.Errors {
		if m := unknownField.FindStringSubmatch(e); m != nil {
			msg := fmt.Sprintf("unknown key %s (not one of Prometheus' HTTP client settings)", m[1])
			if s := yamlconf.Suggest(m[1], yamlconf.Keys(promconfig.HTTPClientConfig{})); s != "" {
				msg = fmt.Sprintf("unknown key %s: did you mean %q?", m[1], s)
			}
			why = append(why, msg)
			continue
		}
		if m := wrongKind.FindStringSubmatch(e); m != nil {
			why = append(why, fmt.Sprintf("%q is not the kind of value its setting takes", m[1]))
			continue
		}
		_, msg, _ := strings.Cut(e, ": ")
		why = append(why, msg)
	}
	return errors.New(strings.Join(why, "; "))
}
