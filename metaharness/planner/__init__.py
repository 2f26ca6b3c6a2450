"""The TPS planner core: plan graph, subagents, solvers and the planning tool."""
