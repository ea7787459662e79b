package app

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/pkg/config"
)

func newConfigCommand(s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the default configuration or validate a configuration file",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "defaults",
		Short: "Print the full configuration with every field at its default",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			data, err := config.Marshal(config.Defaulted())
			if err != nil {
				return err
			}
			_, err = s.out.Write(data)
			return err
		},
	})

	var file, ownerGC string
	validate := &cobra.Command{
		Use:   "validate -f FILE",
		Short: "Check a configuration file; print every problem with its field path and exit 1 if any",
		Example: `  nodegc config validate -f /etc/nodegc/config.yaml
  nodegc config validate -f owner.yaml --owner-gc=only
  nodegc config defaults | nodegc config validate -f -`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q: give the file with a flag: nodegc config validate -f %s", args[0], args[0])
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			mode, err := parseOwnerGCMode(ownerGC)
			if err != nil {
				return err
			}
			loaded, err := decodeConfig(file, s)
			if err != nil {
				return err
			}
			if err := validateConfig(file, loaded, mode, s); err != nil {
				return err
			}
			if w := soloOwnerGCWarning(mode, loaded.Config); w != "" {
				fmt.Fprintf(s.err, "%s: warning: %s\n", displayName(file), w)
			}
			fmt.Fprintf(s.out, "%s: valid\n", displayName(file))
			return nil
		},
	}
	validate.Flags().StringVarP(&file, "file", "f", "", `configuration file to check ("-" for standard input)`)
	// As the other commands take their configuration file.
	validate.Flags().StringVarP(&file, "config", "c", "", "the same as --file")
	validate.Flags().StringVar(&ownerGC, "owner-gc", string(agent.OwnerGCAuto),
		"the --owner-gc of the nodegc run that reads the file (auto, only, off; auto, as for run): what run refuses with it is refused")
	validate.MarkFlagsOneRequired("file", "config")
	validate.MarkFlagsMutuallyExclusive("file", "config")
	cmd.AddCommand(validate)
	return cmd
}

// decodeConfig reads, decodes and defaults the configuration in file ("-":
// standard input) and prints its warnings; it does not validate (see
// validateConfig), so that the flags that override the file can be applied
// first (opts: config.WithOverride, which also applies them to the
// validation of a file that does not decode whole). A file that does not
// decode whole gets its decode and validation problems printed together
// (see config.DecodeError), as validateConfig prints them, and an
// exitError(1).
func decodeConfig(file string, s streams, opts ...config.Option) (*config.Loaded, error) {
	name := displayName(file)
	var (
		loaded *config.Loaded
		err    error
	)
	if file == "-" {
		loaded, err = config.DecodeReader(s.in, opts...)
	} else {
		loaded, err = config.LoadFile(file, opts...)
	}
	if err != nil {
		printProblems(s.err, name, err)
		return nil, &exitError{code: 1}
	}
	for _, w := range loaded.Warnings {
		fmt.Fprintf(s.err, "%s: warning: %s\n", name, w)
	}
	return loaded, nil
}

// validateConfig validates loaded.Config, decoded from file, with whatever
// flags set (Loaded.SetByFlag), and what run with --owner-gc=mode refuses
// in it (modeProblems; none for mode ""). It prints every problem on a line
// of its own prefixed with the file name and, when the file gives it, the
// line (a flag's value is blamed on the flag), in line order, then their
// count; on any problem it returns an exitError(1).
func validateConfig(file string, loaded *config.Loaded, mode agent.OwnerGCMode, s streams) error {
	problems := loaded.Problems(config.Validate(loaded.Config))
	if mp := modeProblems(mode, loaded); len(mp) > 0 {
		problems = append(problems, mp...)
		config.SortProblems(problems)
	}
	if len(problems) > 0 {
		printProblemList(s.err, displayName(file), problems)
		return &exitError{code: 1}
	}
	return nil
}

// printProblems prints err: the problems of a *config.DecodeError, each on
// its own line after the file name, then their count; any other error as is.
func printProblems(w io.Writer, name string, err error) {
	var de *config.DecodeError
	if errors.As(err, &de) {
		printProblemList(w, name, de.Problems)
		return
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
}

func printProblemList(w io.Writer, name string, problems []string) {
	for _, p := range problems {
		fmt.Fprintf(w, "%s: %s\n", name, p)
	}
	fmt.Fprintf(w, "%s: %d problem(s); the configuration is invalid\n", name, len(problems))
}

func displayName(file string) string {
	switch file {
	case "-":
		return "<stdin>"
	case "":
		return noFileName
	}
	return file
}

// noFileName names the configuration in messages when no file gives it.
const noFileName = "configuration (defaults and flags, no -c file)"
