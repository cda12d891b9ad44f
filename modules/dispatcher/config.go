package dispatcher

import (
	"fmt"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/webhooks"
)

// OptionsFromConfig maps mmmq.broker.dispatch to Options: timeout ->
// DefaultTimeout, max-resends -> MaxResends (marked set, so 0 means no
// resend; see Options.MaxResends), backoff-initial, backoff-max,
// max-response-bytes (bytes) and path -> DefaultPath. BatchSize and Hooks
// are left zero (default, none). The app's Fx graph provides Options with it.
func OptionsFromConfig(d config.DispatchConfig) Options {
	return Options{
		BackoffInitial:   d.BackoffInitial,
		BackoffMax:       d.BackoffMax,
		DefaultTimeout:   d.Timeout,
		MaxResponseBytes: d.MaxResponseBytes,
		DefaultPath:      d.Path,
	}.WithMaxResends(d.MaxResends)
}

// OptionsFromSections is OptionsFromConfig(d) with NodeName set from
// mmmq.node-name ("" keeps the host name). The app's Fx graph provides
// Options with it.
func OptionsFromSections(d config.DispatchConfig, n config.NodeConfig) Options {
	o := OptionsFromConfig(d)
	o.NodeName = n.Name
	return o
}

// FromConfig builds the Dispatcher of one mmmq.broker.dispatchers entry
// (also the body of the admin API's create and replace), labelled with
// source (see WithSource). dc should be normalized (config.Normalize:
// commit defaults filled). Errors name the field under key, e.g.
// "mmmq.broker.dispatchers[0].patterns[1]: invalid topic pattern ...".
func FromConfig(dc config.DispatcherConfig, key, source string) (*Dispatcher, error) {
	host, err := ParseHost(dc.Host)
	if err != nil {
		return nil, fmt.Errorf("%s.host: %w", key, err)
	}
	pats := make([]Pattern, 0, len(dc.Patterns))
	for j, s := range dc.Patterns {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("%s.patterns[%d]: %w", key, j, err)
		}
		pats = append(pats, p)
	}
	d := New(dc.Name, host, pats...).WithSource(source)
	if dc.Path != "" {
		d = d.WithPath(dc.Path)
	}
	if dc.Timeout > 0 {
		d = d.WithTimeout(dc.Timeout)
	}
	pol := CommitPolicy{Mode: dc.Commit.Policy}
	if dc.Commit.Policy == config.CommitInterval {
		pol.Interval, pol.MaxCount = dc.Commit.Interval, dc.Commit.MaxCount
	}
	d = d.WithCommitPolicy(pol).WithStart(dc.Start)
	if dc.DeadLetter != nil {
		d = d.WithDeadLetter(*dc.DeadLetter)
	}
	secrets := make([]webhooks.Secret, 0, len(dc.SigningSecrets))
	for j, s := range dc.SigningSecrets {
		sec, err := webhooks.ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("%s.signing-secrets[%d]: %w", key, j, err)
		}
		secrets = append(secrets, sec)
	}
	d = d.WithAckMode(AckMode(dc.AckMode)).
		WithAbnormalLimit(AbnormalLimit{MaxAttempts: dc.MaxAbnormalAttempts, MaxDuration: dc.MaxAbnormalDuration}).
		WithBackoffJitter(dc.BackoffJitter).
		WithSigningSecrets(secrets...).
		WithHeaders(dc.Headers).
		WithCloudEvents(dc.CloudEvents).
		WithMaxInFlight(dc.MaxInFlight).
		WithBatch(Batch{MaxMessages: dc.Batch.MaxMessages, MaxBytes: dc.Batch.MaxBytes, MaxWait: dc.Batch.MaxWait}).
		WithTLS(TLSSettings{CAFile: dc.TLS.CAFile, CertFile: dc.TLS.CertFile, KeyFile: dc.TLS.KeyFile,
			ServerName: dc.TLS.ServerName, InsecureSkipVerify: dc.TLS.InsecureSkipVerify})
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return d, nil
}
