# berth's tool() for a kernel that is not berth's own (ipykernel): the same
# envelope as the bundled kernels, over the kernel's input(). Run it once,
# silently, after connecting.
def _berth_install_tool():
    import builtins
    import json

    class ToolError(RuntimeError):
        """ToolError is raised by tool() when the tool call failed."""

        def __init__(self, tool, message):
            super().__init__(message)
            self.tool = tool

    def tool(name, args=None, **kwargs):
        """tool(name, args) calls one of berth's tools from the cell and
        returns its result; a failed call raises ToolError."""
        if args is None:
            args = kwargs
        elif kwargs:
            raise TypeError("tool() takes args as a dict or as keywords, not both")
        envelope = json.dumps({"berth_tool": str(name), "args": args}, default=repr)
        try:
            raw = builtins.input(envelope)
        except Exception as e:
            if type(e).__name__ == "StdinNotImplementedError":
                raise ToolError(name, "tool() needs a controller that answers input requests; "
                                      "this cell was run without stdin") from None
            raise
        try:
            reply = json.loads(raw)
        except ValueError:
            raise ToolError(name, "tool %s: the reply is not JSON: %.200r" % (name, raw)) from None
        if not isinstance(reply, dict):
            raise ToolError(name, "tool %s: the reply is not an object: %.200r" % (name, raw))
        if reply.get("ok"):
            return reply.get("result")
        raise ToolError(name, str(reply.get("error") or "tool %s failed" % name))

    builtins.tool = tool
    builtins.ToolError = ToolError


_berth_install_tool()
del _berth_install_tool
