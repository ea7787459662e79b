package app

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nodegc/nodegc/internal/version"
)

func newVersionCommand(s streams) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version nodegc was built with",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			info := version.Get()
			switch output {
			case "":
				_, err := fmt.Fprintln(s.out, info.String())
				return err
			case "json":
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			default:
				return fmt.Errorf("--output must be empty or json, not %q", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: empty for one line, or json")
	return cmd
}
