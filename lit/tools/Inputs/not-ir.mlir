// Not IR: the parser must refuse it with a location.
%0 = "no.such"( : () -> ()
