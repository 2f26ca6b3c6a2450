"""Acting agents for the benchmarks: ReAct, Plan-and-Act, TPS/TAPE planning agents, tool-plan executors."""
