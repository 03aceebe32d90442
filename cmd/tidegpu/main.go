// Command tidegpu keeps pools of LLM inference instances on spot capacity
// and fronts them with one gateway. See `tidegpu --help`.
package main

import (
	"os"

	"github.com/tidegpu/tidegpu/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
