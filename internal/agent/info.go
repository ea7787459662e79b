package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodegc/nodegc/internal/version"
	"github.com/nodegc/nodegc/pkg/config"
)

// registerInfo registers nodegc_build_info (what `nodegc version` prints)
// and nodegc_config_info (config.Digest of cfg, the configuration the agent
// runs with: defaults and flags applied), each one series at 1, so that a
// fleet that runs several versions or configurations shows it. It returns
// the digest, for the start-up log.
func registerInfo(reg prometheus.Registerer, cfg *config.NodeGCConfiguration) (string, error) {
	digest, err := config.Digest(cfg)
	if err != nil {
		return "", err
	}
	v := version.Get()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodegc_build_info",
		Help: "1, labelled with the version, revision (commit) and Go version nodegc was built with, as `nodegc version` prints them.",
	}, []string{"version", "revision", "goversion"})
	build.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	conf := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodegc_config_info",
		Help: "1, labelled with sha256, the first 16 hex digits of the SHA-256 of the configuration the agent runs with " +
			"(defaults and flags applied), rendered as `nodegc config defaults` renders one.",
	}, []string{"sha256"})
	conf.WithLabelValues(digest).Set(1)
	reg.MustRegister(build, conf)
	return digest, nil
}
