"""A Flower quickstart (small CNN on scikit-learn's bundled digits) with local DP from fedpriv's LdpMod, LdpFedAvg."""
